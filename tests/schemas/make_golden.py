"""Writes the golden payloads of each schema version: the v1 set, then one file per type a later version changed.
Run once per schema version; existing files are never rewritten: they are the messages already on the wire, and
tests/schemas/test_golden.py proves they still decode."""

from __future__ import annotations

from pathlib import Path

import msgspec

from schemas.errors import ErrorCode, ErrorInfo
from schemas.learner import PolicyCard, PolicyVersion, TrainJob, TrainProgress
from schemas.plan import PlanReply, PlanRequest, PriorRound, RejectedSample, WorkerCard, Workflow
from schemas.rollout import (
    Rollout,
    RolloutBatch,
    RolloutBatchResult,
    RolloutItem,
    RolloutOutcome,
    RolloutResult,
)
from schemas.solve import (
    Budget,
    CancelRequest,
    ProgressEvent,
    RoundRecord,
    SolveRequest,
    SolveResult,
    StepRecord,
)
from schemas.tasks import DeadLetter, TaskCheckpoint
from schemas.usage import Usage, UsageSummary
from schemas.verify import (
    FunctionalTestsReference,
    IOTest,
    Outcome,
    TextReference,
    Verdict,
    VerifyBatch,
    VerifyBatchResult,
    VerifyRequest,
)
from schemas.work import ChatMessage, FaultReason, WorkReply, WorkRequest

U = Usage(input_tokens=120, output_tokens=40, cost_usd=0.00054, calls=1)
WF = Workflow(model_id=[1, 0], subtasks=["solve it", "check and answer"], access_list=[[], "all"])
STEP = StepRecord(
    index=0,
    model_id=1,
    worker="sim-math",
    subtask="solve it",
    access=[],
    response="\\boxed{2}",
    usage=U,
    latency_s=0.3,
)
ROUND = RoundRecord(
    round=0, policy="moa", reasoning="two views", completion="model_id = [1, 0] ...", steps=[STEP]
)
SOLVE_REQ = SolveRequest(
    question="What is 2^100 mod 7?",
    task_id="t-1",
    pool=["sim-math", "sim-small"],
    max_steps=3,
    max_rounds=1,
    domain="math",
    reference="2",
    policy="moa",
    budget=Budget(max_calls=10, max_cost_usd=0.5),
)
VERDICT = Verdict(id="t-1", outcome=Outcome.CORRECT, reason="boxed 2 == 2", extracted="2", duration_s=0.01)

PAYLOADS: dict[str, object] = {
    "solve_request_v1": SOLVE_REQ,
    "solve_request_minimal_v1": SolveRequest(question="hi"),
    "solve_request_code_reference_v1": SolveRequest(
        question="write f",
        domain="code",
        reference=FunctionalTestsReference(func_name="f", tests=[IOTest(input="1", output="2")]),
    ),
    "solve_result_v1": SolveResult(
        task_id="t-1",
        answer="\\boxed{2}",
        workflows=[ROUND],
        usage=UsageSummary(by_worker={"sim-math": U}, planner=U, total=U + U),
        verdict=VERDICT,
        reward=1.0,
        latency_s=1.5,
    ),
    "solve_result_error_v1": SolveResult(
        task_id="", error=ErrorInfo(code=ErrorCode.BAD_REQUEST, message="Expected `str`", field="question")
    ),
    "progress_event_v1": ProgressEvent(
        task_id="t-1", kind="step_done", round=0, step=0, worker="sim-math", usage=U
    ),
    "plan_request_v1": PlanRequest(
        task_id="t-1",
        question="q",
        workers=[WorkerCard(index=0, description="math"), WorkerCard(index=1, description="small", name="s")],
        previous=[PriorRound(completion="c", final_response="r")],
        round=1,
    ),
    "plan_reply_v1": PlanReply(policy="moa", completion="...", reasoning="r", workflow=WF, usage=U),
    "work_request_v1": WorkRequest(
        worker="sim-math",
        messages=[ChatMessage(role="user", content="q\n\nsolve it")],
        task_id="t-1",
        round=0,
        step=1,
        max_tokens=512,
    ),
    "work_reply_v1": WorkReply(
        worker="sim-math", text="\\boxed{2}", model="sim-math", usage=U, latency_s=0.2
    ),
    "work_reply_v2": WorkReply(
        worker="sim-math",
        text="\\boxed{2}",
        model="sim-math",
        usage=U,
        latency_s=2.7,
        attempts=3,
        faults={FaultReason.RATE_LIMITED.value: 1, FaultReason.TIMEOUT.value: 1},
    ),
    "solve_request_v2": msgspec.structs.replace(SOLVE_REQ, progress=False, cache=True),
    "work_request_v2": WorkRequest(
        worker="sim-math",
        messages=[ChatMessage(role="user", content="q\n\nsolve it")],
        task_id="t-1",
        step=1,
        idempotent=True,
    ),
    "verify_batch_v1": VerifyBatch(
        items=[
            VerifyRequest(id="t-1", response="\\boxed{2}", reference=TextReference(answer="2", kind="math"))
        ]
    ),
    "verify_batch_result_v1": VerifyBatchResult(verdicts=[VERDICT]),
    "task_checkpoint_v1": TaskCheckpoint(
        task_id="t-1", request=SOLVE_REQ, rounds=[ROUND], workflow=WF, spent=U
    ),
    "task_checkpoint_v3": TaskCheckpoint(
        task_id="t-1", request=SOLVE_REQ, rounds=[ROUND], workflow=WF, spent=U, schema_version=3
    ),
    "rollout_batch_v4": RolloutBatch(
        rollouts=[
            Rollout(
                id="g0/s3",
                question="What is 2^100 mod 7?",
                pool=["sim-math", "sim-small"],
                completion='Solve, then check.\nmodel_id = [0, 1]\nsubtasks = ["solve it", "check and answer"]\n'
                'access_list = [[], ["all"]]',
                reference="2",
                domain="math",
                round=1,
                previous=[PriorRound(completion="model_id = [1] ...", final_response="\\boxed{3}")],
                max_steps=3,
                budget=Budget(max_calls=10),
                cache=True,
                policy_version="step-40",
            ),
            Rollout(id="g0/s4", question="q", pool=["sim-math"], completion="no lists", reference="2"),
        ]
    ),
    "rollout_batch_result_v4": RolloutBatchResult(
        results=[
            RolloutResult(
                id="g0/s3",
                reward=1.0,
                parsed=True,
                answer="\\boxed{2}",
                verdict=VERDICT,
                steps=[STEP],
                usage=U,
                latency_s=0.4,
                policy_version="step-40",
            ),
            RolloutResult(
                id="g0/s4",
                reward=0.0,
                parse_error=ErrorInfo(code=ErrorCode.FORMAT_ERROR, message="missing_lists: no lists found"),
                policy_version="step-40",
            ),
            RolloutResult(
                id="g0/s5",
                parsed=True,
                error=ErrorInfo(
                    code=ErrorCode.UNAVAILABLE, message="verifier did not answer", retryable=True
                ),
            ),
        ]
    ),
    "rollout_batch_result_error_v4": RolloutBatchResult(
        error=ErrorInfo(code=ErrorCode.BAD_REQUEST, message="unknown worker 'x'", field="rollouts[1].pool[0]")
    ),
    "train_job_v5": TrainJob(
        job_id="j-1", config='name = "tiny-sim"\n[grpo]\nsteps = 60\n', output_dir="runs/j-1"
    ),
    "train_progress_v5": TrainProgress(
        job_id="j-1", stage="grpo", step=20, total=60, figures={"reward": 0.71}
    ),
    "train_progress_done_v5": TrainProgress(
        job_id="j-1",
        stage="done",
        done=True,
        error=ErrorInfo(
            code=ErrorCode.BAD_REQUEST, message="grpo.generations: Expected `int` >= 2", field="config"
        ),
    ),
    "policy_version_v5": PolicyVersion(
        version="tiny-sim@60",
        run="tiny-sim",
        step=60,
        object="tiny-sim/60",
        base="sha256:" + "3" * 64,
        base_name="runs/tiny-sim/base-model",
        sha256="4" * 64,
        size=20480,
        created=1795500000.5,
        rank=8,
    ),
    "policy_version_v6": PolicyVersion(
        version="smollm2-route@0",
        run="smollm2-route",
        step=0,
        object="smollm2-route/0",
        base="sha256:" + "5" * 64,
        base_name="runs/models/smollm2-135m-instruct",
        sha256="6" * 64,
        size=4945054,
        created=1795600000.25,
        rank=8,
        card=PolicyCard(
            prompt="task",
            show_domain=True,
            max_steps=5,
            temperature=0.5,
            max_tokens=192,
            base="sha256:" + "5" * 64,
            trained_by="smollm2-route",
        ),
    ),
    "plan_reply_v7": PlanReply(
        policy="moa",
        completion="...",
        workflow=WF,
        usage=U,
        attempts=2,
        fallback_used=True,
        format_failures=[
            "missing_lists: no lists found",
            "unbalanced: a list is cut off (cut off at max_tokens)",
        ],
        rejected=[
            RejectedSample(reason="missing_lists: no lists found", text="Let me think about it."),
            RejectedSample(
                reason="unbalanced: a list is cut off (cut off at max_tokens)",
                text="model_id = [0, 1]\nsubtasks = [",
            ),
        ],
    ),
    "solve_result_v7": SolveResult(
        task_id="t-1",
        answer="\\boxed{2}",
        workflows=[
            msgspec.structs.replace(
                ROUND,
                fallback_used=True,
                planner_attempts=0,
                policy_error=ErrorInfo(
                    code=ErrorCode.PLANNER_ERROR,
                    message="policy endpoint answered HTTP 404: The model `conductor-7b` does not exist.",
                    detail="Error code: 404",
                ),
                rejected=[
                    RejectedSample(reason="missing_lists: no lists found", text="I would ask model 0.")
                ],
            )
        ],
        usage=UsageSummary(by_worker={"sim-math": U}, planner=U, total=U + U),
        latency_s=1.5,
    ),
    "solve_request_v8": msgspec.structs.replace(SOLVE_REQ, owner="gateway"),
    "cancel_request_v8": CancelRequest(task_id="t-1", reason="the HTTP client hung up"),
    "solve_result_cancelled_v8": SolveResult(
        task_id="t-1",
        answer="\\boxed{2}",
        workflows=[
            msgspec.structs.replace(
                ROUND,
                error=ErrorInfo(
                    code=ErrorCode.CANCELLED, message="cancelled by its owner: the HTTP client hung up"
                ),
            )
        ],
        usage=UsageSummary(by_worker={"sim-math": U}, total=U),
        error=ErrorInfo(code=ErrorCode.CANCELLED, message="cancelled by its owner: the HTTP client hung up"),
        latency_s=0.4,
    ),
    "rollout_item_v10": RolloutItem(
        key="0f9c2d7e4b1a4c8e9d3f6a2b5c7e1d40-17",
        rollout=Rollout(
            id="s3-q1-c5",
            question="What is 2^100 mod 7?",
            pool=["sim-math", "sim-small"],
            completion='model_id = [0]\nsubtasks = ["solve it"]\naccess_list = [[]]',
            reference="2",
            domain="math",
            policy_version="run@3",
        ),
        deadline=1795000000.25,
    ),
    "rollout_outcome_v10": RolloutOutcome(
        key="0f9c2d7e4b1a4c8e9d3f6a2b5c7e1d40-17",
        result=RolloutResult(
            id="s3-q1-c5",
            reward=1.0,
            parsed=True,
            answer="\\boxed{2}",
            verdict=VERDICT,
            steps=[STEP],
            usage=U,
            latency_s=1.2,
            policy_version="run@3",
        ),
    ),
    "rollout_outcome_error_v10": RolloutOutcome(
        key="0f9c2d7e4b1a4c8e9d3f6a2b5c7e1d40-18",
        error=ErrorInfo(code=ErrorCode.BAD_REQUEST, message="unknown worker 'gpt-99'", field="pool[1]"),
    ),
    "policy_version_v11": PolicyVersion(
        version="smollm2-views@0",
        run="smollm2-views",
        step=0,
        object="smollm2-views/0",
        base="sha256:" + "5" * 64,
        base_name="runs/models/smollm2-135m-instruct",
        sha256="7" * 64,
        size=4945054,
        created=1795700000.5,
        rank=8,
        card=PolicyCard(
            prompt="task",
            show_domain=True,
            max_steps=5,
            temperature=0.5,
            max_tokens=192,
            base="sha256:" + "5" * 64,
            trained_by="smollm2-views",
            workers=["sha256:" + "a" * 64, "sha256:" + "b" * 64],
        ),
    ),
    "policy_version_v12": PolicyVersion(
        version="my-run@20",
        run="my-run",
        step=20,
        object="my-run/20",
        base="sha256:" + "5" * 64,
        base_name="my-base",
        sha256="8" * 64,
        size=1048576,
        created=1795800000.0,
        rank=16,
        card=PolicyCard(
            prompt="examples", temperature=0.7, max_tokens=1024, trained_by="my-run", questions="as_asked"
        ),
    ),
    "dead_letter_v1": DeadLetter(
        task_id="t-1",
        request=SOLVE_REQ,
        attempts=5,
        errors=[ErrorInfo(code=ErrorCode.UNAVAILABLE, message="planner did not answer", retryable=True)],
    ),
    "solve_result_v13": SolveResult(
        task_id="team-a.0f9c2d7e4b1a4c8e9d3f6a2b5c7e1d40",
        answer="\\boxed{2}",
        workflows=[ROUND],
        usage=UsageSummary(by_worker={"sim-math": U}, total=U),
        latency_s=1.2,
        schema_version=13,
        tenant="gateway",
        key="team-a",
    ),
    "solve_request_v13": msgspec.structs.replace(
        SOLVE_REQ, task_id="team-a.0f9c2d7e4b1a4c8e9d3f6a2b5c7e1d40", key="team-a"
    ),
    "cancel_request_v13": CancelRequest(task_id="t-1", reason="the HTTP client hung up", tenant="acme"),
    "rollout_batch_v14": RolloutBatch(
        rollouts=[
            Rollout(
                id="g0/s3",
                completion='Solve, then check.\nmodel_id = [0, 1]\nsubtasks = ["solve it", "check and answer"]\n'
                'access_list = [[], ["all"]]',
                request=SolveRequest(
                    question="What is 2^100 mod 7?",
                    pool=["sim-math", "sim-small"],
                    max_steps=3,
                    domain="math",
                    reference="2",
                    budget=Budget(max_calls=10),
                    cache=True,
                    progress=False,
                ),
                round=1,
                previous=[PriorRound(completion="model_id = [1] ...", final_response="\\boxed{3}")],
                policy_version="step-40",
            ),
        ]
    ),
}

if __name__ == "__main__":
    out = Path(__file__).parent / "golden"
    for name, obj in PAYLOADS.items():
        path = out / f"{name}.json"
        if not path.exists():  # today's encoder would add the newer fields to an old payload
            path.write_bytes(msgspec.json.format(msgspec.json.encode(obj), indent=2) + b"\n")
