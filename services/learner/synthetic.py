"""Synthetic Conductor completions for the cold start (issue 12 item 3): reasoning plus three valid lists.

A small model never writes a parseable workflow on its own (SmolLM2-135M: 0 of 810), so GRPO from the format
reward gets no signal. Supervised fine-tuning on these completions teaches the *format* and a repertoire of
strategies — the paper's emergent topologies (docs/method.md §7): a single expert, a chain (plan then solve, solve
then format), independent attempts then an aggregator, and verify-then-revise — with varied subtask wording. The
*routing* is random (ordinals drawn uniformly from the view), so what the cold start teaches about which model
suits which question is nothing: that is left for GRPO to learn from rewards.

Every completion is rendered by ``conductor.workflow.render_completion`` and parses back (a test checks all of them);
second-round completions either hand the answer back (three empty lists) or check and revise it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from conductor.workflow import render_completion
from schemas.plan import Access, Workflow

ANSWER_FORMAT = {
    "math": ["Put the final answer in \\boxed{}.", "End with the final answer in \\boxed{}."],
    "mcq": ["End with a line 'Answer: X' with the letter of the option.", "Finish with 'Answer: X'."],
    "code": ["Give the complete program in one python code block.", "Output the full Python solution."],
}
KIND = {"math": "a math problem", "mcq": "a multiple-choice question", "code": "a programming task"}

SOLVE = [
    "Solve the question step by step.",
    "Work out the answer carefully, showing the key steps.",
    "Answer the question. Reason briefly first.",
    "Solve the problem and explain your reasoning.",
]
PLAN = [
    "Outline a plan to solve the question. Do not give the final answer yet.",
    "List the steps needed to solve this question and the facts it depends on.",
]
FOLLOW = [
    "Follow the plan above and solve the question.",
    "Use the plan above to work out the answer.",
]
CHECK = [
    "Check the answer above step by step and correct it if needed.",
    "Verify the previous solution and fix any mistake.",
    "Review the work above and confirm or correct the answer.",
]
CRITIQUE = [
    "Critique the solution above: find any error, but do not rewrite it.",
    "Check the previous answer for mistakes and explain what is wrong, if anything.",
]
REVISE = [
    "Revise your earlier answer using the critique above.",
    "Correct the solution using the review above.",
]
AGGREGATE = [
    "Compare the answers above and give the one that is most likely correct.",
    "Combine the attempts above into one final answer, resolving any disagreement.",
    "Several attempts are above. Evaluate them and state the correct final answer.",
]
ONE_MODEL = [
    "One model should be enough to answer it.",
    "A single well-chosen model can answer it directly.",
]
HANDBACK_REASONING = [
    "The earlier result is consistent and answers the question, so I keep it.",
    "The previous answer looks correct and complete. I hand it back unchanged.",
]
RETRY_REASONING = [
    "The earlier result may be wrong, so I ask Model {a} to check and correct it.",
    "I am not sure the previous answer is right. Model {a} will verify it.",
]

Topology = Callable[[random.Random, int, str], tuple[str, Workflow]]


def _pick(rng: random.Random, options: list[str]) -> str:
    return rng.choice(options)


def _final(rng: random.Random, text: str, domain: str) -> str:
    return f"{text} {_pick(rng, ANSWER_FORMAT.get(domain, ['Give the final answer.']))}"


def _workflow(ids: list[int], tasks: list[str], access: list[Access]) -> Workflow:
    return Workflow(model_id=ids, subtasks=tasks, access_list=access)


def single(rng: random.Random, k: int, domain: str) -> tuple[str, Workflow]:
    a = rng.randrange(k)
    # The ordinal is written once, in the list: a decision made in two places would have to be copied consistently.
    why = f"This is {KIND.get(domain, 'a question')}. {_pick(rng, ONE_MODEL)}"
    return why, _workflow([a], [_final(rng, _pick(rng, SOLVE), domain)], [[]])


def chain(rng: random.Random, k: int, domain: str) -> tuple[str, Workflow]:
    a, b = rng.randrange(k), rng.randrange(k)
    if rng.random() < 0.5:
        why = (
            f"This is {KIND.get(domain, 'a question')}. Model {a} plans, then Model {b} solves with the plan."
        )
        tasks = [_pick(rng, PLAN), _final(rng, _pick(rng, FOLLOW), domain)]
    else:
        why = (
            f"This is {KIND.get(domain, 'a question')}. Model {a} solves it and Model {b} checks the answer."
        )
        tasks = [_final(rng, _pick(rng, SOLVE), domain), _final(rng, _pick(rng, CHECK), domain)]
    return why, _workflow([a, b], tasks, [[], "all"])


def fan_out(rng: random.Random, k: int, domain: str) -> tuple[str, Workflow]:
    n = rng.choice([2, 2, 3])
    ids = [rng.randrange(k) for _ in range(n + 1)]
    why = (
        f"This is {KIND.get(domain, 'a question')}. {n} independent attempts raise the chance that one is right; "
        f"then Model {ids[-1]} compares them."
    )
    tasks = [_final(rng, _pick(rng, SOLVE), domain) for _ in range(n)] + [
        _final(rng, _pick(rng, AGGREGATE), domain)
    ]
    return why, _workflow(ids, tasks, [[] for _ in range(n)] + ["all"])


def verify_revise(rng: random.Random, k: int, domain: str) -> tuple[str, Workflow]:
    a, b = rng.randrange(k), rng.randrange(k)
    why = (
        f"This is {KIND.get(domain, 'a question')}. Model {a} solves it, Model {b} looks for mistakes, "
        f"and Model {a} revises."
    )
    tasks = [
        _final(rng, _pick(rng, SOLVE), domain),
        _pick(rng, CRITIQUE),
        _final(rng, _pick(rng, REVISE), domain),
    ]
    return why, _workflow([a, b, a], tasks, [[], "all", "all"])


TOPOLOGIES: dict[str, tuple[Topology, float]] = {
    "single": (single, 0.35),
    "chain": (chain, 0.25),
    "fan_out": (fan_out, 0.25),
    "verify_revise": (verify_revise, 0.15),
}
"""Each topology with its share of the corpus."""


def first_round(
    rng: random.Random, k: int, domain: str, max_steps: int = 5, topologies: Sequence[str] = tuple(TOPOLOGIES)
) -> str:
    """A first-round completion for a view of ``k`` workers (ids drawn uniformly: random routing)."""
    names = list(topologies)
    while True:
        build = TOPOLOGIES[rng.choices(names, weights=[TOPOLOGIES[n][1] for n in names])[0]][0]
        reasoning, workflow = build(rng, k, domain)
        if len(workflow) <= max_steps:
            return render_completion(reasoning, workflow)


def second_round(rng: random.Random, k: int, domain: str) -> str:
    """A recursion-round completion: hand the result back, or have a model check and correct it."""
    if rng.random() < 0.5:
        return render_completion(_pick(rng, HANDBACK_REASONING), _workflow([], [], []))
    a = rng.randrange(k)
    task = _final(rng, _pick(rng, CHECK), domain)
    return render_completion(_pick(rng, RETRY_REASONING).format(a=a), _workflow([a], [task], ["all"]))


def sim_response(rng: random.Random, answer: str, domain: str) -> str:
    """A stand-in final response for a second-round prompt (what a sim worker writes, right or wrong)."""
    tail = {"math": f"\\boxed{{{answer}}}", "mcq": f"Answer: {answer}"}.get(domain, f"Final answer: {answer}")
    return f"I will work through this step by step. {tail}"
