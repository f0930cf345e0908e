"""The published copies on the Hugging Face Hub, through ``datasets`` — only when asked (``conductor eval --hub``).

``datasets`` is an optional import (``pip install datasets``) and needs a network on first use; nothing here runs
in tests or by default. The rows are written to a JSONL file in the published format and read by the same loader
as a local copy, so a Hub record and a local record can never be parsed differently. Gated sets (GPQA) need a
Hugging Face token in the environment, as ``datasets`` expects.
"""

from __future__ import annotations

import datetime
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.errors import MissingDataError

if TYPE_CHECKING:
    from tasks.registry import HubSpec


def hub_file(name: str, spec: HubSpec | None) -> Path:
    """A local JSONL file holding the benchmark's Hub rows."""
    if spec is None:
        raise MissingDataError(f"{name}: no Hub copy is registered (its data ship with a package)")
    try:
        import datasets
    except ImportError as exc:
        raise MissingDataError(f"{name}: loading from the Hub needs `pip install datasets`") from exc
    try:
        rows = _rows(datasets, spec)
    except Exception as exc:  # network, auth (gated sets), a renamed split: all "the data are not there"
        raise MissingDataError(
            f"{name}: cannot load {spec.repo} from the Hub: {type(exc).__name__}: {exc}"
        ) from exc
    out = Path(tempfile.mkdtemp(prefix="conductor-hub-")) / f"{name}.jsonl"
    with out.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, default=_plain) + "\n")
    return out


def _rows(datasets: object, spec: HubSpec) -> list[dict]:
    load = datasets.load_dataset  # type: ignore[attr-defined]
    if spec.files:
        base = f"hf://datasets/{spec.repo}/"
        data = load("json", data_files={"test": [base + f for f in spec.files]}, split="test")
    else:
        data = load(spec.repo, spec.config, split=spec.split)
    return [dict(row) for row in data]


def _plain(value: object) -> object:
    """JSON for the few non-JSON values Hub rows hold (LiveCodeBench's contest_date is a timestamp)."""
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    return str(value)
