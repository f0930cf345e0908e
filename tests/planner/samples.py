"""Plan requests and Conductor completions shared by the planner tests."""

from __future__ import annotations

from schemas.plan import PlanRequest, PriorRound, WorkerCard


def request(cards: list[WorkerCard], **kw: object) -> PlanRequest:
    fields: dict[str, object] = {"task_id": "t-1", "question": "What is 6 * 7?", "workers": cards}
    fields.update(kw)
    return PlanRequest(**fields)  # type: ignore[arg-type]


PRIOR = [
    PriorRound(
        completion="Plan.\nmodel_id = [0]\nsubtasks = ['solve']\naccess_list = [[]]", final_response="42"
    )
]

GOOD = """Model 1 is the math specialist; Model 3 checks the format.

model_id = [1, 3]
subtasks = ["Compute 6 * 7.", "Check the product above and reply with the number only."]
access_list = [[], ["all"]]"""

HANDBACK = "The result is correct.\nmodel_id = []\nsubtasks = []\naccess_list = []"
