"""Shared eval fixtures: the services of this process on the session's real nats-server, with the sim pool's
workers over every fixture question, and `conductor eval` run on them (the tests own the event loop)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from conductor.app.cli import build_parser
from conductor.app.evaluate import conclude, execute, prepare
from conductor.app.runtime import create_services, running, service_names
from conductor.settings import CommonSettings
from evaluation.simanswers import run_pool
from tasks import registry

# The replay entries are real models' recorded answers: a replay pool answers them (tests/tasks/test_replay.py,
# tests/worker_adapter/test_replay_provider.py, tests/evaluation/test_routers.py), not the sim pool.
FIXTURES = [*registry.sim_benchmarks(), "sim"]
QUIET = Console(file=io.StringIO(), width=200)


@pytest.fixture
def env(
    nats_url: str, subject_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    problems = registry.load_all(FIXTURES)
    pool = run_pool(tmp_path / "pool", [p for items in problems.values() for p in items])
    values = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_POOL": str(pool),
        "CONDUCTOR_LOG_LEVEL": "WARNING",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


@pytest.fixture
async def services(env: dict[str, str]):
    async with running(
        create_services(service_names("all"), env), CommonSettings.from_env(env), name="eval-test"
    ):
        yield env


async def evaluate(out: Path, *argv: str):
    """What `conductor eval` does (prepare, execute, conclude), on services already running."""
    args = build_parser().parse_args(["eval", "--out", str(out), *argv])
    prep = prepare(args)
    done, new, where = await execute(prep, QUIET)
    return done, new, conclude(prep, done, new, where, 0.0, QUIET)
