"""Reading a source's records: JSONL (optionally .gz), JSON arrays, CSV or Parquet, each row a plain dict.

A line that is not JSON is a ``DatasetError`` naming ``file:line``, so a bad record in a file of thousands is found
at once; a missing field names the fields the row does have.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Iterator
from pathlib import Path

from tasks.errors import DatasetError


def read_rows(path: str | Path) -> Iterator[dict]:
    """JSONL (optionally .gz), JSON arrays, CSV, or Parquet (when pyarrow is installed)."""
    return (row for _, row in numbered_rows(path))


def numbered_rows(path: str | Path) -> Iterator[tuple[int, dict]]:
    """``(line, row)``: the line number for JSONL, the data row's ordinal (from 1) for the other formats."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise DatasetError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from exc
        yield from enumerate(pq.read_table(path).to_pylist(), 1)
        return
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="") as fh:
        if ".csv" in name:
            yield from enumerate(csv.DictReader(fh), 1)
            return
        if ".jsonl" not in name and name.endswith((".json", ".json.gz")):
            data = json.load(fh)
            yield from enumerate(data if isinstance(data, list) else data.get("rows", []), 1)
            return
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{path}:{n}: not JSON: {exc}") from exc
                if not isinstance(row, dict):
                    raise DatasetError(
                        f"{path}:{n}: a record must be a JSON object, got {type(row).__name__}"
                    )
                yield n, row


def field(row: dict, *names: str) -> object:
    """The first of ``names`` the row holds (not null); a ``DatasetError`` naming them all otherwise."""
    for name in names:
        if name in row and row[name] is not None:
            return row[name]
    raise DatasetError(f"record lacks {' / '.join(names)}: has {sorted(row)[:12]}")
