"""The replay provider: recorded answers verbatim, the behaviour models, usage, pool checks, one solve end to end."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import pytest

from conductor.app.runtime import create_services, running
from conductor.pool import PoolError, load_pool, parse_pool, replay_behaviour
from conductor.settings import CommonSettings
from schemas.work import ChatMessage, FaultReason
from services.planner.app import PlannerService
from services.planner.config import PlannerSettings
from services.planner.policies.scripted import ScriptedPolicy
from services.worker_adapter.app import create_service
from services.worker_adapter.cache import call_digest
from services.worker_adapter.provider import CallParams, PermanentProviderError
from services.worker_adapter.providers.replay import (
    ReplayProvider,
    check_pool,
    count_tokens,
    final_answer,
    majority_text,
)
from tasks import replay

DATA = Path(replay.__file__).parent / "data"
PARAMS = CallParams(max_tokens=4096, temperature=0.0, timeout_s=10.0)


def answer(text: str) -> str:
    return "```json\n" + json.dumps({"reasoning": "Worked it out.", "answer": text}) + "\n```"


RECORDS = [
    {
        "id": "q1",
        "set": "gsm",
        "question": "Tom has 3 apples and buys 4 more. How many apples does he have?",
        "prompt": None,
        "choices": None,
        "gold": "# 7",
        "answers": {
            "strong": {"text": answer("7"), "chars": 0},
            "weak": {"text": answer("12"), "chars": 0},
            "other": {"text": answer("12"), "chars": 0},
            "silent": {"text": "I cannot say.", "chars": 0},
        },
    },
    {
        "id": "c1",
        "set": "crux",
        "question": "def f(x):\n    return [x, x]\nassert f(1) == ??",
        "gold": "[1, 1]",
        "answers": {
            "strong": {"text": answer("[1, 1]"), "chars": 0},
            "weak": {"text": answer("[1,1]"), "chars": 0},
            "other": {"text": answer("(1, 1)"), "chars": 0},
            "silent": {"text": "no idea", "chars": 0},
        },
    },
]


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "toy.jsonl.gz"
    path.write_bytes(gzip.compress("\n".join(json.dumps(r) for r in RECORDS).encode()))
    return path


def pool_text(behaviour: str = "own", models=("strong", "weak", "other")) -> str:
    return "\n".join(
        f"""[[workers]]
name = "{m}"
provider = "replay"
price_in_per_mtok = 1.0
price_out_per_mtok = 2.0
[workers.replay]
model = "{m}"
behaviour = "{behaviour}"
"""
        for m in models
    )


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text)]


async def test_a_first_step_gets_the_recorded_text_verbatim_with_usage(table: Path) -> None:
    pool = parse_pool(pool_text())
    provider = ReplayProvider(pool, str(table))
    messages = user(RECORDS[0]["question"] + "\n\nSolve the problem.")
    done = await provider.complete(pool.get("weak"), messages, PARAMS)
    assert done.text == RECORDS[0]["answers"]["weak"]["text"]
    assert done.model == "replay:own:weak"
    assert done.input_tokens == count_tokens([messages[0].content]) > 0
    assert done.output_tokens == count_tokens([done.text]) > 0
    assert pool.get("weak").cost(done.input_tokens, done.output_tokens) > 0


async def test_the_task_id_names_the_item_before_the_question(table: Path) -> None:
    pool = parse_pool(pool_text())
    provider = ReplayProvider(pool, str(table))
    params = msgspec.structs.replace(PARAMS, task=replay.item_task_id("crux", "c1"))
    done = await provider.complete(pool.get("strong"), user("A question the tables never saw."), params)
    assert done.text == RECORDS[1]["answers"]["strong"]["text"]


async def test_a_question_without_a_record_is_a_permanent_error(table: Path) -> None:
    pool = parse_pool(pool_text())
    with pytest.raises(PermanentProviderError, match="no replay record") as caught:
        await ReplayProvider(pool, str(table)).complete(pool.get("strong"), user("What is 2+2?"), PARAMS)
    assert caught.value.reason == FaultReason.CLIENT_ERROR


async def test_own_ignores_what_it_sees(table: Path) -> None:
    pool = parse_pool(pool_text("own"))
    seen = [ChatMessage(role="assistant", content=answer("12"))] * 2
    messages = [*user(RECORDS[0]["question"]), *seen, *user("Check the answers above.")]
    done = await ReplayProvider(pool, str(table)).complete(pool.get("strong"), messages, PARAMS)
    assert done.text == RECORDS[0]["answers"]["strong"]["text"]


async def test_majority_follows_the_most_common_final_answer(table: Path) -> None:
    pool = parse_pool(pool_text("majority"))
    provider = ReplayProvider(pool, str(table))
    weak = RECORDS[0]["answers"]["weak"]["text"]
    two_wrong = [*user(RECORDS[0]["question"]), *(ChatMessage(role="assistant", content=weak),) * 2]
    done = await provider.complete(pool.get("strong"), two_wrong, PARAMS)
    assert done.text == weak and done.model == "replay:majority:strong"
    one_each = [*user(RECORDS[0]["question"]), ChatMessage(role="assistant", content=weak)]
    done = await provider.complete(pool.get("strong"), one_each, PARAMS)  # a tie goes to its own
    assert done.text == RECORDS[0]["answers"]["strong"]["text"]


def test_majority_reads_final_answers_per_set() -> None:
    own = answer("[1, 1]")
    assert majority_text("crux", own, [answer("(1,1)"), answer("(1, 1)")]) == answer(
        "(1,1)"
    )  # the first giver
    assert majority_text("crux", own, [answer("[1,1]"), answer("(1, 1)")]) == own  # [1,1] is its own answer
    assert majority_text("gsm", "no answer", ["nothing either"]) == "no answer"
    assert majority_text("gsm", "no answer", [answer("5")]) == answer("5")  # its own abstains
    assert final_answer("mmlu-redux", "C") == "C" and final_answer("mmlu-redux", "") is None
    assert final_answer("math-l5", answer("\\frac{1}{2}")) == final_answer(
        "math-l5", "so \\boxed{\\dfrac{1}{2}}"
    )


def test_pool_checks_are_one_line_pool_errors(table: Path) -> None:
    with pytest.raises(PoolError, match="mix behaviour models"):
        parse_pool(pool_text("own") + "\n" + pool_text("majority", models=("silent",)))
    with pytest.raises(PoolError, match="needs its prices"):
        parse_pool(pool_text().replace("price_in_per_mtok = 1.0\nprice_out_per_mtok = 2.0\n", ""))
    with pytest.raises(PoolError, match=r"needs a \[workers.replay\] table"):
        parse_pool('[[workers]]\nname = "a"\nprovider = "replay"\nprice_in_per_mtok = 1.0\n')
    with pytest.raises(PoolError, match=r"model\(s\) \['absent'\] not in the replay tables"):
        check_pool(parse_pool(pool_text(models=("strong", "absent"))), str(table))
    check_pool(parse_pool(pool_text()), str(table))
    assert replay_behaviour(parse_pool(pool_text("majority"))) == "majority"


def test_start_up_refuses_a_missing_table_and_an_unknown_model(tmp_path: Path, table: Path) -> None:
    pool_file = tmp_path / "pool.toml"
    pool_file.write_text(pool_text(models=("strong", "absent")))
    env = {"CONDUCTOR_POOL": str(pool_file), "CONDUCTOR_REPLAY_PATH": str(table)}
    with pytest.raises(PoolError, match="absent"):
        create_service(env)
    with pytest.raises(PoolError, match="does not exist"):
        create_service({**env, "CONDUCTOR_REPLAY_PATH": str(tmp_path / "nowhere.jsonl.gz")})


def test_the_cache_key_tells_replay_workers_apart(table: Path) -> None:
    pool = parse_pool(pool_text())
    messages = user(RECORDS[0]["question"])
    assert call_digest(pool.get("strong"), PARAMS, messages) != call_digest(
        pool.get("weak"), PARAMS, messages
    )


@pytest.mark.parametrize("name", ["replay_pool", "replay_pool_no_o1", "mmlu_pool"])
def test_shipped_pools_load_and_their_models_are_recorded(name: str) -> None:
    pool = load_pool(DATA / f"{name}.toml")
    check_pool(pool, "")
    assert replay_behaviour(pool) == "own"


COMPLETION = """Two cheap attempts, then a strong model reconciles them.

model_id = [0, 1, 2]
subtasks = ["Solve the problem.", "Solve the problem independently.", "Compare the answers above and give the final answer."]
access_list = [[], [], ["all"]]
"""


@pytest.mark.e2e
async def test_one_solve_through_the_services_with_a_replay_pool(nats_url, subject_prefix, table, tmp_path):
    pool_file = tmp_path / "pool.toml"
    pool_file.write_text(pool_text("majority", models=("weak", "other", "strong")))
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_LOG_LEVEL": "WARNING",
        "CONDUCTOR_POOL": str(pool_file),
        "CONDUCTOR_REPLAY_PATH": str(table),
    }
    common = CommonSettings.from_env(env)
    planner = PlannerService(
        PlannerSettings(common=common, fallback=None), policy=ScriptedPolicy(lambda _m: COMPLETION)
    )
    services = [*create_services(["executor", "worker-adapter", "verifier"], env), planner]
    async with running(services, common, name="replay-e2e"):
        import nats

        nc = await nats.connect(nats_url)
        request = {"question": RECORDS[0]["question"], "domain": "math", "reference": "7"}
        reply = await nc.request(
            f"{subject_prefix}conductor.solve.client", json.dumps(request).encode(), timeout=60
        )
        await nc.close()
    result = json.loads(reply.data)
    assert result["error"] is None, result["error"]
    steps = result["workflows"][0]["steps"]
    assert [s["worker"] for s in steps] == ["weak", "other", "strong"]
    assert steps[0]["response"] == RECORDS[0]["answers"]["weak"]["text"]
    # majority: the strong worker sees two answers of 12 and its own 7, so it replies with a text giving 12
    assert steps[2]["response"] == RECORDS[0]["answers"]["weak"]["text"]
    assert result["verdict"]["outcome"] == "incorrect" and result["verdict"]["extracted"] == "12"
    assert result["usage"]["total"]["cost_usd"] > 0
