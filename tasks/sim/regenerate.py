"""Rewrite the shipped sim workers' dataset from the generators: ``python -m tasks.sim.regenerate``."""

from __future__ import annotations

from tasks import sim
from tasks.sim.family import SEED, dataset_bytes


def main() -> None:
    data = dataset_bytes(SEED)
    sim.dataset_path().write_bytes(data)
    lines = data.count(b"\n")
    print(f"wrote {sim.dataset_path()} ({lines} records, {len(data) // 1024} KiB)")


if __name__ == "__main__":
    main()
