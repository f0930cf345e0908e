"""The Conductor prompt builder: the paper's structure (docs/method.md §1) and recursion prompt (§5), in our words.

Part of the domain, beside the workflow language it asks for, so the planner and the learner build the same prompt
without either importing the other.

Prompt and parser live side by side: the lists this prompt asks for are exactly what ``conductor.workflow``
parses, and every few-shot completion below is checked against the parser by the tests.

Structure (docs/method.md §1): role; up to N steps; each step is a model, a subtask and an access list; the first model
gets the question and its subtask; later models get the granted history and then their subtask; the last model's
answer is returned; the three list names and the access semantics; few-shot examples; the question; the available
models as "Model i: <description>" (names hidden unless a ``WorkerCard`` carries one).

The prompt offers the paper's binary access ("all" or []); the parser also accepts indices of earlier steps (the
paper's ablation, docs/method.md §1, ours), so a policy that writes them is not penalised.

Recursion (docs/method.md §5): the Conductor sees each earlier round's completion and its final response ("result of the
coordination strategy") and either writes a new workflow or three empty lists to hand that result back unchanged.
In a new workflow, "all" access also grants the latest final response: the executor puts it first in such a step's
history, as one user/assistant pair under ``services.executor.messages.PREVIOUS_ROUND_SUBTASK``; integer indices
refer to this round's steps only (see that module).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from conductor.answers import agreement, same_answer
from schemas.learner import PolicyCard
from schemas.plan import PriorRound, StepAnswer, WorkerCard
from schemas.work import ChatMessage

MAX_SHOWN_RESPONSE_CHARS = 8_000
"""A previous round's final response is shown up to this length on a recursion round, so a long answer cannot
push the question and the rules out of the policy's context window."""

SYSTEM_PROMPT = """\
You are the Conductor. You answer questions by coordinating a team of language models rather than by answering \
yourself. The models are numbered Model 0, Model 1, and so on; they have different skills, and the short \
description of each is all you know about them.

Write a workflow of at most {max_steps} steps. Each step sends one model one subtask that you write for it:
- The first step's model receives the user's question followed by its subtask.
- Each later step's model receives the history you grant it (earlier steps' subtasks and responses, as a \
conversation), followed by its own subtask.
- The response of the last step is returned to the user as the final answer, so the last subtask must ask for a \
complete answer in the form the question expects.

Write the workflow as three Python lists of equal length, one entry per step, in the order the steps run:
- model_id: the number of the model that performs each step.
- subtasks: the instruction each model receives. Write it for that model: ask it to plan, solve, write code, \
check, criticise, revise or combine earlier work, and say what to output.
- access_list: what each step sees of the earlier steps: ["all"] to see every earlier step's subtask and \
response, or [] to see none of them (an independent attempt).

Think briefly about the question and which models suit it, then end with the three lists. If you write the lists \
more than once, only the last complete set counts.

{examples}"""

RECURSION_RULES = """\
You already coordinated the models on this question. Your earlier completion and the final response it produced \
(the result of the coordination strategy) are shown above.

Decide whether that result answers the question correctly and completely.
- If it does, write three empty lists: model_id = [], subtasks = [], access_list = []. The result is then returned \
to the user unchanged.
- If it does not, write a new workflow of at most {max_steps} steps. In this new workflow ["all"] access also \
grants the result above, shown before this round's earlier steps, so a step can check, correct or build on it; \
[] still means an independent attempt that sees nothing."""


class FewShot(msgspec.Struct, frozen=True, kw_only=True):
    """One worked example: a question, the pool it was planned for, and a successful completion."""

    question: str
    models: list[str]  # descriptions, shown as "Model i: ..."
    completion: str


EXAMPLE_MODELS = [
    "Large general-purpose model; strong reasoning in most domains, slower and more expensive.",
    "Reasoning model specialised in mathematics; careful step-by-step derivations.",
    "Mid-size model with broad factual, medical and scientific knowledge.",
    "Small fast model; reliable at following formatting instructions and checking short answers.",
]
"""The pool the examples were planned for. It differs from the live pool on purpose: the examples teach the
format and kinds of strategy, not which ordinal is good at what."""

FEW_SHOT: list[FewShot] = [
    # docs/method.md §1: out-of-domain examples (one medical MCQ, one limit, two Countdown puzzles) beat in-domain ones.
    FewShot(
        question=(
            "A 58-year-old man has crushing chest pain for 40 minutes. The ECG shows ST-segment elevation in "
            "leads II, III and aVF. Occlusion of which artery is most likely?\n"
            "(A) Left anterior descending artery (B) Left circumflex artery (C) Right coronary artery "
            "(D) Left main coronary artery"
        ),
        models=EXAMPLE_MODELS,
        completion="""\
ST elevation in II, III and aVF points to the inferior wall, so this is a knowledge question with a short \
answer. Model 2 knows medicine; Model 0 can double-check the reasoning and give a clean letter.

model_id = [2, 0]
subtasks = ["Identify which myocardial territory leads II, III and aVF represent and which coronary artery \
usually supplies it. Explain briefly and pick one of the options A-D.", "Check the explanation above against \
standard ECG territories and coronary dominance. Reply with the letter of the correct option only."]
access_list = [[], ["all"]]""",
    ),
    FewShot(
        question=r"Evaluate $\lim_{x \to 0} \frac{\sin x - x\cos x}{x^3}$.",
        models=EXAMPLE_MODELS,
        completion="""\
A limit that two different methods can settle. I will get two independent derivations, one by Taylor series \
and one by L'Hopital's rule, then let the math model compare them and state the value.

model_id = [1, 0, 1]
subtasks = ["Evaluate the limit using Taylor expansions of sin x and cos x around 0 up to the x^3 terms. Show \
the expansion and give the exact value.", "Evaluate the limit by applying L'Hopital's rule as many times as \
needed. Show each derivative and give the exact value.", "Two solutions of the limit are above. Compare them; \
if they disagree, find the error by redoing the Taylor expansion. Give the final exact value as \\\\boxed{...}."]
access_list = [[], [], ["all"]]""",
    ),
    FewShot(
        question=(
            "Using the numbers [4, 6, 25, 75], each exactly once, and the operations +, -, *, /, write an "
            "expression equal to 124. Put the expression in <answer></answer>."
        ),
        models=EXAMPLE_MODELS,
        completion="""\
A small search problem. The math model can search; the small model is good at checking arithmetic and format.

model_id = [1, 3]
subtasks = ["Find an expression that equals 124 using 4, 6, 25 and 75, each exactly once, with +, -, *, /. \
Search systematically, for example by first combining the two small numbers, and show the arithmetic.", "Recompute \
the expression above step by step. Check that it equals 124 and uses 4, 6, 25 and 75 exactly once each. If it is \
correct, output only <answer>expression</answer>; if not, fix it first."]
access_list = [[], ["all"]]""",
    ),
    FewShot(
        question=(
            "Using the numbers [7, 9, 13, 52], each exactly once, and the operations +, -, *, /, write an "
            "expression equal to 99. Put the expression in <answer></answer>."
        ),
        models=EXAMPLE_MODELS,
        completion="""\
This one is harder: 99 is close to no simple sum of these numbers, and division may be needed (52 / 13 = 4). \
Two models search independently to raise the chance that one succeeds, then the small model verifies and \
formats.

model_id = [1, 0, 3]
subtasks = ["Find an expression equal to 99 using 7, 9, 13 and 52, each exactly once, with +, -, *, /. Consider \
divisions that give whole numbers. Show the arithmetic.", "Find an expression equal to 99 using 7, 9, 13 and 52, \
each exactly once, with +, -, *, /. Work backwards from 99 = 9 * 11. Show the arithmetic.", "Above are two \
attempts. Evaluate each expression exactly and keep one that equals 99 and uses 7, 9, 13 and 52 exactly once each. \
Output only <answer>expression</answer>."]
access_list = [[], [], ["all"]]""",
    ),
]


def model_lines(workers: Sequence[WorkerCard]) -> str:
    """ "Model i: description" per worker; the operator's name only when the pool reveals it (docs/method.md §1)."""
    return "\n".join(
        f"Model {w.index} ({w.name}): {w.description}" if w.name else f"Model {w.index}: {w.description}"
        for w in workers
    )


def view_fingerprint(workers: Sequence[WorkerCard]) -> str:
    """``sha256:<hex>`` of the worker view as the Conductor reads it (numbering, descriptions, names when shown):
    a policy trained on one fixed view records it in its card (schemas/learner.py ``PolicyCard.view``)."""
    shown = [[w.index, w.description, w.name] for w in workers]
    return "sha256:" + hashlib.sha256(msgspec.json.encode(shown)).hexdigest()


def worker_fingerprint(worker: WorkerCard) -> str:
    """``sha256:<hex>`` of one worker as the Conductor reads it, whatever its number (description, name when shown):
    a policy trained on varied views records the workers they were drawn from (``PolicyCard.workers``)."""
    return "sha256:" + hashlib.sha256(msgspec.json.encode([worker.description, worker.name])).hexdigest()


def view_refusal(card: PolicyCard | None, workers: Sequence[WorkerCard]) -> str | None:
    """Why a policy with ``card`` must not plan for this view of ``workers`` (its fallback does), or None: a policy
    trained on one fixed view is a pointer into that numbering; one trained on views of a pool knows that pool's
    workers and no others."""
    if card is None:
        return None
    if card.view and view_fingerprint(workers) != card.view:
        return f"was trained on one worker view ({card.view[:19]}…) and this request shows another ({len(workers)} workers)"
    if card.workers:
        known = set(card.workers)
        unseen = [w.index for w in workers if worker_fingerprint(w) not in known]
        if unseen:
            return (
                f"was trained on views of {len(known)} workers and this request shows workers it never read about "
                f"(Model {', '.join(map(str, unseen))})"
            )
    return None


def render_examples(examples: Sequence[FewShot] = FEW_SHOT) -> str:
    """The examples block; empty without examples (a small policy's short prompt, services/learner)."""
    if not examples:
        return ""
    blocks = ["Here are examples of successful workflows, each planned for its own example team of models."]
    for i, ex in enumerate(examples, 1):
        models = "\n".join(f"Model {j}: {d}" for j, d in enumerate(ex.models))
        blocks.append(
            f"### Example {i}\nQuestion:\n{ex.question}\n\nModels:\n{models}\n\nWorkflow:\n{ex.completion}"
        )
    return "\n\n".join(blocks)


def system_prompt(max_steps: int, examples: Sequence[FewShot] = FEW_SHOT) -> str:
    return SYSTEM_PROMPT.format(max_steps=max_steps, examples=render_examples(examples)).rstrip()


def _task_block(question: str, workers: Sequence[WorkerCard], domain: str | None) -> str:
    hint = f"\n\nAnswer type: {domain}" if domain else ""
    return f"Question:\n{question}{hint}\n\nModels available to you:\n{model_lines(workers)}"


def conductor_messages(
    question: str,
    workers: Sequence[WorkerCard],
    *,
    max_steps: int,
    domain: str | None = None,
    examples: Sequence[FewShot] = FEW_SHOT,
) -> list[ChatMessage]:
    """The first round's prompt: rules and examples as the system turn, the task as the user turn."""
    user = f"{_task_block(question, workers, domain)}\n\nWrite your workflow."
    return [
        ChatMessage(role="system", content=system_prompt(max_steps, examples)),
        ChatMessage(role="user", content=user),
    ]


def _shown(response: str, limit: int) -> str:
    if len(response) <= limit:
        return response
    return f"{response[:limit]}\n[... truncated]" if limit else "(not shown: see each step's final answer)"


AGREEMENT = {
    "agree": "All steps gave the same final answer.",
    "differ": "The steps gave different final answers.",
    "missing": "Some steps gave no final answer.",
}


def step_answer_lines(answers: Sequence[StepAnswer]) -> str:
    """Each step's final answer on its own line, then whether they agree (schema 13; nothing for older rounds)."""
    if not answers:
        return ""
    lines = [
        f"Step {a.step} (Model {a.model_id}): {a.answer if a.answer is not None else '(none)'}"
        for a in answers
    ]
    verdict = AGREEMENT[agreement([a.answer for a in answers])]
    return "\n\nFinal answer of each step:\n" + "\n".join(lines) + "\n" + verdict


ACROSS_ROUNDS = {
    "matches": "The latest round's final answer matches an earlier round's step.",
    "new": "The latest round's final answer matches no earlier round's step.",
    "none": "The latest round gave no final answer.",
}


def across_rounds(previous: Sequence[PriorRound]) -> str | None:
    """Whether the latest round's final answer (its last step's) is one an earlier round's step already stated:
    ``matches``, ``new`` or ``none`` (it stated none); None with fewer than two rounds, or rounds written before
    schema 13 (no step answers). A third round decides from it (services/learner/three_round.py): a tie-breaker
    that sides with one of two differing answers settles the question, one that sides with neither does not."""
    if len(previous) < 2 or not previous[-1].answers or not any(p.answers for p in previous[:-1]):
        return None
    latest = previous[-1].answers[-1].answer
    if latest is None:
        return "none"
    earlier = (a.answer for p in previous[:-1] for a in p.answers)
    return "matches" if any(same_answer(latest, a) for a in earlier) else "new"


def recursion_messages(
    question: str,
    workers: Sequence[WorkerCard],
    previous: Sequence[PriorRound],
    *,
    max_steps: int,
    domain: str | None = None,
    examples: Sequence[FewShot] = FEW_SHOT,
    response_chars: int = MAX_SHOWN_RESPONSE_CHARS,
) -> list[ChatMessage]:
    """A recursion round (docs/method.md §5): the task, each earlier round's completion and result (its first
    ``response_chars`` characters) and each step's final answer, then the choice."""
    rounds = "\n\n".join(
        f"### Round {i}\nYour completion:\n{p.completion}\n\n"
        f"Result of the coordination strategy (final response):\n{_shown(p.final_response, response_chars)}"
        f"{step_answer_lines(p.answers)}"
        for i, p in enumerate(previous, 1)
    )
    if (across := across_rounds(previous)) is not None:
        rounds += f"\n\nAcross rounds: {ACROSS_ROUNDS[across]}"
    user = (
        f"{_task_block(question, workers, domain)}\n\n{rounds}\n\n"
        f"{RECURSION_RULES.format(max_steps=max_steps)}"
    )
    return [
        ChatMessage(role="system", content=system_prompt(max_steps, examples)),
        ChatMessage(role="user", content=user),
    ]


PROMPT_STYLES = ("examples", "rules", "task")
"""How much of the prompt a policy is given, the same at training and serving time (a policy trained on one style
is off-distribution on another):

- ``examples``: the rules and the few-shot block in the system turn (docs/method.md §1; the default, ~1,500 tokens);
- ``rules``: the rules without the examples;
- ``task``: the user turn only (question, answer type, models; recursion rounds add the earlier rounds and the
  recursion rules). For small models trained on CPU (presets/smollm2-sim.toml): 170 tokens instead of 500, and a
  135M model learns the format from the cold start, not from reading the rules.
"""


def policy_messages(
    question: str,
    workers: Sequence[WorkerCard],
    previous: Sequence[PriorRound] = (),
    *,
    max_steps: int,
    domain: str | None = None,
    style: str = "examples",
    response_chars: int = MAX_SHOWN_RESPONSE_CHARS,
) -> list[ChatMessage]:
    """The prompt in one of ``PROMPT_STYLES``: a first round without ``previous``, a recursion round with it."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"prompt style {style!r}: expected one of {', '.join(PROMPT_STYLES)}")
    examples = FEW_SHOT if style == "examples" else ()
    built = (
        recursion_messages(
            question,
            workers,
            previous,
            max_steps=max_steps,
            domain=domain,
            examples=examples,
            response_chars=response_chars,
        )
        if previous
        else conductor_messages(question, workers, max_steps=max_steps, domain=domain, examples=examples)
    )
    return [m for m in built if style != "task" or m.role != "system"]
