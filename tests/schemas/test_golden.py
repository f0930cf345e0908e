"""Schema evolution (rules in schemas/__init__.py): every golden payload ever written must still decode, and
decoding then re-encoding keeps every field it had. Old files are never regenerated."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from schemas.learner import PolicyVersion, TrainJob, TrainProgress
from schemas.plan import PlanReply, PlanRequest
from schemas.rollout import RolloutBatch, RolloutBatchResult, RolloutItem, RolloutOutcome
from schemas.solve import CancelRequest, ProgressEvent, SolveRequest, SolveResult
from schemas.tasks import DeadLetter, TaskCheckpoint
from schemas.verify import VerifyBatch, VerifyBatchResult
from schemas.work import WorkReply, WorkRequest

GOLDEN = Path(__file__).parent / "golden"

TYPES: dict[str, type] = {
    "solve_request": SolveRequest,
    "solve_result": SolveResult,
    "progress_event": ProgressEvent,
    "cancel_request": CancelRequest,
    "plan_request": PlanRequest,
    "plan_reply": PlanReply,
    "work_request": WorkRequest,
    "work_reply": WorkReply,
    "verify_batch": VerifyBatch,
    "verify_batch_result": VerifyBatchResult,
    "task_checkpoint": TaskCheckpoint,
    "dead_letter": DeadLetter,
    "rollout_batch": RolloutBatch,
    "rollout_batch_result": RolloutBatchResult,
    "rollout_item": RolloutItem,
    "rollout_outcome": RolloutOutcome,
    "train_job": TrainJob,
    "train_progress": TrainProgress,
    "policy_version": PolicyVersion,
}


def _kind(path: Path) -> type:
    stem = path.stem.rsplit("_v", 1)[0]
    for prefix in sorted(TYPES, key=len, reverse=True):
        if stem == prefix or stem.startswith(prefix + "_"):
            return TYPES[prefix]
    raise LookupError(f"no type for golden file {path.name}")


FILES = sorted(GOLDEN.glob("*.json"))


def test_every_type_has_a_golden_payload():
    assert {_kind(p) for p in FILES} == set(TYPES.values())


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_golden_payload_decodes_and_keeps_its_fields(path: Path):
    raw = path.read_bytes()
    obj = msgspec.json.decode(raw, type=_kind(path))
    again = json.loads(msgspec.json.encode(obj))
    _keeps(json.loads(raw), again, "$")


def _keeps(original: object, again: object, where: str) -> None:
    """Fields may be added (with defaults) at any depth, never dropped or changed."""
    if isinstance(original, dict):
        assert isinstance(again, dict), where
        for key, value in original.items():
            assert key in again, f"{where}.{key} was dropped"
            _keeps(value, again[key], f"{where}.{key}")
    elif isinstance(original, list):
        assert isinstance(again, list) and len(again) == len(original), where
        for i, (a, b) in enumerate(zip(original, again, strict=True)):
            _keeps(a, b, f"{where}[{i}]")
    else:
        assert again == original, where


def test_the_field_check_looks_inside_nested_structs():
    _keeps({"request": {"q": 1}}, {"request": {"q": 1, "new": True}}, "$")  # an added nested field is fine
    with pytest.raises(AssertionError, match=r"\$\.request\.q"):
        _keeps({"request": {"q": 1}}, {"request": {"q": 2}}, "$")
    with pytest.raises(AssertionError, match="dropped"):
        _keeps({"steps": [{"a": 1}]}, {"steps": [{}]}, "$")


def test_unknown_fields_are_ignored_for_forward_compatibility():
    newer = b'{"question": "q", "a_field_from_the_future": {"x": 1}}'
    assert msgspec.json.decode(newer, type=SolveRequest).question == "q"


def test_checkpoints_carry_their_format_version():
    """Stored checkpoints say which format wrote them, as results do; ones stored before the field read as 2."""
    old = msgspec.json.decode((GOLDEN / "task_checkpoint_v1.json").read_bytes(), type=TaskCheckpoint)
    new = msgspec.json.decode((GOLDEN / "task_checkpoint_v3.json").read_bytes(), type=TaskCheckpoint)
    assert (old.schema_version, new.schema_version) == (2, 3)
