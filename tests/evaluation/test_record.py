"""`conductor record` on a real nats-server with every service in this process: the sim pool over `sim` items, a
rerun that resumes, the budget cap, bad input; and real SDKs (openai, anthropic) against local wire-format servers."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conductor.app.cli import build_parser, main
from conductor.app.record import BUDGET_STOPPED, conclude, execute, prepare, prompt, worst_case_usd
from conductor.app.runtime import create_services, running, service_names
from conductor.pool import load_pool
from conductor.settings import CommonSettings
from evaluation.runner import Options
from services.planner.baselines import ANSWER
from tasks import registry, replay
from tasks.recording import Journal, read_table
from tests.evaluation.conftest import QUIET
from tests.vllm_server import VllmServer
from tests.worker_adapter.fakeapi import FakeAPI, Reply, anthropic_ok, openai_ok

pytestmark = pytest.mark.e2e


async def record(out: Path, *argv: str) -> tuple[int, int, int]:
    """What `conductor record` does on services already running: (exit status, calls asked, answers recorded)."""
    plan = prepare(build_parser().parse_args(["record", "--out", str(out), *argv]))
    outcome, where = await execute(plan, QUIET)
    return conclude(plan, outcome, where, QUIET), len(plan.calls), outcome.recorded


def _sim(services: dict[str, str], limit: str, *more: str) -> tuple[str, ...]:
    return ("--pool", services["CONDUCTOR_POOL"], "--benchmark", "sim", "--limit", limit, *more)


async def test_records_the_sim_pool_then_resumes(services: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "sim.jsonl.gz"
    argv = _sim(services, "3")
    code, asked, got = await record(out, *argv, "--workers", "sim-math,sim-coder", "--k", "2")
    assert (code, asked, got) == (0, 12, 12)
    table = read_table(out)
    pool = load_pool(Path(services["CONDUCTOR_POOL"]))
    problems = {p.id: p for p in registry.load_benchmark("sim")}
    assert len(table) == 3 and not Journal(out).path.exists()
    for (set_name, item), rec in table.items():
        p = problems[item]
        assert set_name == "sim" and rec.question == p.question and rec.gold == p.reference.answer
        assert rec.prompt == prompt(p, ANSWER, pool) and rec.prompt.startswith(p.question)
        assert set(rec.answers) == set(rec.more_answers) == {"sim-math", "sim-coder"}
        assert all(len(more) == 1 for more in rec.more_answers.values())
        assert all(a.chars == len(a.text) > 0 and a.cost_usd > 0 for a in rec.answers.values())
    lines = gzip.decompress(out.read_bytes()).splitlines()
    assert len(lines) == 3 and {"id", "set", "question", "prompt", "choices", "gold", "answers"} <= set(
        json.loads(lines[0])
    )
    shipped_reader = replay.read_table(out)  # what a replay worker loads (tasks/replay.py)
    assert sorted(r.key for r in shipped_reader) == sorted(table) and all(
        len(r.answers) == 2 for r in shipped_reader
    )
    assert await record(out, *argv, "--workers", "sim-math,sim-coder", "--k", "2") == (0, 0, 0)
    code, asked, got = await record(out, *argv, "--k", "2")  # the other three workers only
    assert (code, asked, got) == (0, 18, 18) and all(len(r.answers) == 5 for r in read_table(out).values())


async def test_a_killed_run_s_journal_is_folded_in(services: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "sim.jsonl.gz"
    argv = _sim(services, "2", "--workers", "sim-math")
    await record(out, *argv)
    first = read_table(out)
    journal = Journal(out)
    [rec, *_] = first.values()
    out.unlink()  # only the journal of a run killed after one answer and mid-way through the next line
    journal.append(rec)
    with journal.path.open("ab") as fh:
        fh.write(b'{"id": "cut')
    code, asked, got = await record(out, *argv)
    assert (code, asked, got) == (0, 1, 1) and read_table(out) == first and not journal.path.exists()


async def test_the_budget_cap_stops_before_passing_it(services: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "sim.jsonl.gz"
    argv = _sim(services, "4", "--workers", "sim-frontier")
    # a cap just above the largest worst case of one call (its whole max_tokens): the first call fits, and once
    # it has cost anything no second one does
    probe = prepare(build_parser().parse_args(["record", "--out", str(out), *argv]))
    cap = max(worst_case_usd(c, probe.pool) for c in probe.calls) + 1e-9
    args = build_parser().parse_args(["record", "--out", str(out), *argv, "--budget-usd", repr(cap)])
    plan = dataclasses.replace(prepare(args), options=Options(concurrency=1))
    outcome, where = await execute(plan, QUIET)
    assert conclude(plan, outcome, where, QUIET) == BUDGET_STOPPED
    assert outcome.stopped and outcome.recorded == 1 and 0 < outcome.spent_usd <= cap
    assert sum(a.cost_usd for r in read_table(out).values() for a in r.answers.values()) == pytest.approx(
        outcome.spent_usd
    )
    code, asked, _ = await record(out, *argv)  # no cap: the rest
    assert code == 0 and asked == 4 - outcome.recorded and len(read_table(out)) == 4


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--workers", "gpt-9"], "--workers names worker(s) ['gpt-9'] not in the pool"),
        (["--benchmark", "gsm8k"], "unknown task 'gsm8k'"),
        (["--out", "/nonexistent/dir/t.jsonl.gz"], "/nonexistent/dir is not a directory"),
        (["--out", "t.jsonl"], "a replay table is a .jsonl.gz file"),
        (["--pool", "/nonexistent/pool.toml"], "pool.toml"),
    ],
)
def test_bad_input_exits_2_naming_it(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    base = {"--pool": "tasks/data/sim_pool.toml", "--benchmark": "sim", "--out": str(tmp_path / "t.jsonl.gz")}
    base.update(dict(zip(argv[::2], argv[1::2], strict=True)))
    assert main(["record", "--embedded", *(x for kv in base.items() for x in kv)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("conductor record: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "content, message",
    [
        (b"not gzip at all", "not a readable gzip replay table"),
        (gzip.compress(b'{"id": "1"}\n'), "t.jsonl.gz:1: not a replay record"),
        (gzip.compress(b"{not json\n"), "t.jsonl.gz:1: not JSON"),
    ],
)
def test_a_corrupt_table_exits_2_naming_it(content: bytes, message: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "t.jsonl.gz"
    out.write_bytes(content)
    argv = [
        "record",
        "--embedded",
        "--pool",
        "tasks/data/sim_pool.toml",
        "--benchmark",
        "sim",
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    assert message in capsys.readouterr().err and out.read_bytes() == content


def test_an_unwritable_folder_exits_2(tmp_path: Path, capsys) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    tmp_path.chmod(0o500)
    try:
        argv = ["record", "--pool", "tasks/data/sim_pool.toml", "--benchmark", "sim"]
        assert main([*argv, "--embedded", "--out", str(tmp_path / "t.jsonl.gz")]) == 2
        assert "permission denied" in capsys.readouterr().err
    finally:
        tmp_path.chmod(0o700)


@contextlib.asynccontextmanager
async def _serving(
    pool: Path, nats_url: str, subject_prefix: str, monkeypatch: pytest.MonkeyPatch, extra: dict[str, str]
) -> AsyncIterator[None]:
    """Every service in this process on the session's nats-server, serving ``pool``."""
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_POOL": str(pool),
        "CONDUCTOR_LOG_LEVEL": "WARNING",
        **extra,
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    async with running(create_services(service_names("all"), env), CommonSettings.from_env(env), name="rec"):
        yield


def _wire(body: dict[str, Any]) -> Reply:
    """Each provider's wire reply, naming the question's last line so the table can be checked against it."""
    last = body["messages"][-1]["content"].splitlines()[0]
    if body["model"] == "claude-x":
        return anthropic_ok(f"claude on {last}\nAnswer: B", input_tokens=31, output_tokens=12, cache_read=0)
    return openai_ok(f"gpt on {last}\nAnswer: A", prompt=29, completion=11)


async def test_real_sdks_against_wire_format_servers(
    nats_url: str, subject_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeAPI([_wire] * 8) as api:
        pool = tmp_path / "pool.toml"
        pool.write_text(
            f"""
[[workers]]
name = "gpt"
provider = "openai"
model = "gpt-x"
base_url = "{api.url}/v1"
api_key_env = "TEST_OPENAI_KEY"
price_in_per_mtok = 2.0
price_out_per_mtok = 10.0
max_retries = 0

[[workers]]
name = "claude"
provider = "anthropic"
model = "claude-x"
base_url = "{api.url}"
api_key_env = "TEST_ANTHROPIC_KEY"
price_in_per_mtok = 3.0
price_out_per_mtok = 15.0
max_retries = 0
"""
        )
        keys = {"TEST_OPENAI_KEY": "sk-test", "TEST_ANTHROPIC_KEY": "ak-test"}
        out = tmp_path / "wire.jsonl.gz"
        async with _serving(pool, nats_url, subject_prefix, monkeypatch, keys):
            code, asked, got = await record(out, "--pool", str(pool), "--benchmark", "sim", "--limit", "3")
    assert (code, asked, got) == (0, 6, 6) and len(api.seen) == 6
    sent = {(s.body["model"], s.body["messages"][-1]["content"]) for s in api.seen}
    table = read_table(out)
    for rec in table.values():
        assert {("gpt-x", rec.prompt), ("claude-x", rec.prompt)} <= sent  # the exact prompt each SDK sent
        first = rec.prompt.splitlines()[0]
        gpt, claude = rec.answers["gpt"], rec.answers["claude"]
        assert gpt.text == f"gpt on {first}\nAnswer: A" and (gpt.input_tokens, gpt.output_tokens) == (29, 11)
        assert claude.text == f"claude on {first}\nAnswer: B" and claude.output_tokens == 12
        assert gpt.cost_usd == pytest.approx((29 * 2.0 + 11 * 10.0) / 1e6)


@pytest.mark.vllm  # the server: the vllm_server fixture (tests/conftest.py), skipped without one
async def test_records_a_vllm_served_worker(
    vllm_server: VllmServer,
    nats_url: str,
    subject_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SmolLM2 (or whatever the tier serves) as the recorded worker, through the services and the openai SDK."""
    pool = tmp_path / "pool.toml"
    pool.write_text(
        f"""
[[workers]]
name = "smollm2"
provider = "openai_compatible"
model = "{vllm_server.model}"
base_url = "{vllm_server.url}"
max_tokens = 256
timeout_s = 300.0
price_in_per_mtok = 0.1
price_out_per_mtok = 0.2
"""
    )
    out = tmp_path / "vllm.jsonl.gz"
    argv = ("--pool", str(pool), "--benchmark", "sim", "--limit", "2", "--k", "2", "--timeout", "600")
    async with _serving(pool, nats_url, subject_prefix, monkeypatch, {}):
        assert (await record(out, *argv))[1:] == (4, 4)
        assert await record(out, *argv) == (0, 0, 0)
    problems = {p.id: p for p in registry.load_benchmark("sim")}
    for (_, item), rec in read_table(out).items():
        assert rec.prompt == prompt(problems[item], ANSWER, load_pool(pool))
        for a in [rec.answers["smollm2"], *rec.more_answers["smollm2"]]:
            assert a.text.strip() and 0 < a.output_tokens <= 256 and a.input_tokens > 0
