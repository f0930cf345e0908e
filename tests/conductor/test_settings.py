"""One settings reader: every documented setting is read by the service that owns it, bounds and spellings are
checked once, and the two bugs stay fixed (one backoff name meaning two things; a cap the planner never read)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest

import conductor.data
from conductor.app.process import ProcessSettings
from conductor.app.runtime import create_services
from conductor.app.settings_doc import owners, settings_markdown
from conductor.pool import load_pool
from conductor.settings import (
    Count,
    Env,
    EnvFields,
    SettingDoc,
    SettingsError,
    read,
    settings_table,
)
from schemas.solve import Budget
from services.executor.config import ExecutorSettings
from services.planner.config import PlannerSettings
from services.planner.core import Planner
from services.worker_adapter.config import WorkerAdapterSettings
from tests.planner.samples import request

ROOT = Path(__file__).resolve().parents[2]
DEMO_POOL = str(Path(conductor.data.__file__).parent / "demo_pool.toml")

EXAMPLES = {
    "NATS_URL": "nats://nats.example:4222",
    "CONDUCTOR_NATS_CREDENTIALS": "/run/conductor/nats-credentials",
    "CONDUCTOR_LOG_LEVEL": "debug",
    "CONDUCTOR_SUBJECT_PREFIX": "tenant.",
    "CONDUCTOR_POOL": DEMO_POOL,
    "CONDUCTOR_METRICS_HOST": "127.0.0.1",
    "CONDUCTOR_GC": "1000,5,5",
    "CONDUCTOR_EVENT_LOOP": "asyncio",
    "CONDUCTOR_POLICY": "local:/models/conductor",  # policy versions and an adapter apply to a local policy only
    "CONDUCTOR_POLICY_BASE_URL": "http://127.0.0.1:8000/v1",
    "CONDUCTOR_POLICY_API_KEY_ENV": "TEST_POLICY_KEY",
    "CONDUCTOR_PLANNER_FALLBACK": "single",
    "CONDUCTOR_POLICY_PROMPT": "task",
    "CONDUCTOR_SANDBOX_BACKEND": "none",
    "CONDUCTOR_SANDBOX_BWRAP": "/opt/bwrap",
    "CONDUCTOR_SANDBOX_REQUIRE": "netns,uid",
    "CONDUCTOR_SANDBOX_HIDE": "/a:/b",
    "CONDUCTOR_SANDBOX_PRELOAD": "json,re",
    "CONDUCTOR_GATEWAY_HOST": "0.0.0.0",
    "CONDUCTOR_POLICY_ADAPTER": "smollm2-views3",  # a shipped policy's name (the test below serves a card-less one)
    "CONDUCTOR_POLICY_VERSIONS": "watch",
    "CONDUCTOR_LEARNER_CHECKPOINT_DIR": "/checkpoints",
    "CONDUCTOR_POLICY_DEPLOYMENT": "rel-conductor-vllm-policy",
    "CONDUCTOR_KUBE_NAMESPACE": "ai",
    "CONDUCTOR_RECORD_PATH": "/var/lib/conductor/served.jsonl.gz",
    "CONDUCTOR_REPLAY_PATH": "/data/replay:/data/mine.jsonl.gz",
    "CONDUCTOR_KUBECONFIG": "/etc/kube/config",
    "CONDUCTOR_POLICY_SERVER_URL": "http://rel-conductor-vllm-policy:8000",
    "CONDUCTOR_POLICY_LORA_NAME": "conductor-policy",
    "CONDUCTOR_NATS_USER": "acme",
    "CONDUCTOR_TENANTS": "acme,beta",
}
"""Values for settings whose type gives no obvious non-default example (strings, paths, lists)."""


def _at(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _example(cls: type, row: SettingDoc) -> str:
    """A valid value of ``row`` that reads to something other than its default."""
    if row.env in EXAMPLES:
        return EXAMPLES[row.env]
    default = _at(read(cls, {}), row.field)
    kind = row.type.removesuffix(" or unset")
    if kind == "bool":
        candidates = ["false" if default else "true"]
    elif kind == "int":
        candidates = [str(default + 1), str(default - 1)] if default is not None else ["7"]
    elif kind == "float":
        candidates = [str(default * 2 + 1), str(default / 2)] if default is not None else ["2.5"]
    else:
        candidates = []
    assert candidates, f"{row.env}: add an example value to EXAMPLES"
    for raw in candidates:
        try:
            if _at(read(cls, {row.env: raw}), row.field) != default:
                return raw
        except SettingsError:
            continue
    raise AssertionError(f"{row.env}: no example within its bound; add one to EXAMPLES")


def test_the_committed_settings_document_is_current() -> None:
    committed = (ROOT / "docs" / "settings.md").read_text()
    assert committed == settings_markdown(), "run `make settings` and commit docs/settings.md"


def test_each_variable_has_one_declaration() -> None:
    """One name per meaning: a variable read in several places is the same ``Env`` (same doc, same parser)."""
    seen: dict[str, tuple[str, str]] = {}
    for cls in [ProcessSettings, *owners().values()]:
        for row in settings_table(cls):
            assert seen.setdefault(row.env, (row.doc, row.bound)) == (row.doc, row.bound), row.env


@pytest.mark.parametrize("service", list(owners()))
async def test_every_documented_setting_is_read_by_the_service_that_owns_it(
    service: str, tmp_path: Path
) -> None:
    cls = owners()[service]
    rows = list(settings_table(cls))
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[[keys]]\nname = "ops"\nsha256 = "{"a" * 64}"\n')
    # An adapter without a policy card: the shipped one's card pins the temperature and length this test sets to
    # other values (a contradiction is refused at start-up, tests/planner/test_policy_card.py).
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    shipped = Path(conductor.data.POLICIES) / EXAMPLES["CONDUCTOR_POLICY_ADAPTER"]
    (adapter / "adapter_config.json").write_bytes((shipped / "adapter_config.json").read_bytes())
    examples = {"CONDUCTOR_GATEWAY_KEYS_FILE": str(keys), "CONDUCTOR_POLICY_ADAPTER": str(adapter)}
    env = {row.env: examples.get(row.env) or _example(cls, row) for row in rows} | {
        "TEST_POLICY_KEY": "sk-test"
    }
    svc = create_services([service], env)[0]
    try:
        defaults = read(cls, {})
        for row in rows:
            got = _at(svc.settings, row.field)
            assert got != _at(defaults, row.field), f"{service} ignores {row.env}"
            assert got == _at(read(cls, {row.env: env[row.env]}), row.field), row.env
    finally:
        await svc.stop()


def test_process_settings_are_read_by_serve() -> None:
    for row in settings_table(ProcessSettings):
        raw = _example(ProcessSettings, row)
        assert _at(ProcessSettings.from_env({row.env: raw}), row.field) != _at(ProcessSettings(), row.field)


def test_the_executor_and_the_worker_adapter_backoffs_have_their_own_names() -> None:
    """Bug: CONDUCTOR_BACKOFF_BASE_S/_MAX_S set both; in `serve all` one value set the two meanings."""
    env = {
        "CONDUCTOR_REDELIVERY_BACKOFF_BASE_S": "7",
        "CONDUCTOR_REDELIVERY_BACKOFF_MAX_S": "70",
        "CONDUCTOR_RETRY_BACKOFF_BASE_S": "0.1",
        "CONDUCTOR_RETRY_BACKOFF_MAX_S": "2",
    }
    intake = ExecutorSettings.from_env(env).intake
    adapter = WorkerAdapterSettings.from_env(env)
    assert (intake.backoff_base_s, intake.backoff_max_s) == (7.0, 70.0)
    assert (adapter.backoff_base_s, adapter.backoff_max_s) == (0.1, 2.0)
    for old in ("CONDUCTOR_BACKOFF_BASE_S", "CONDUCTOR_BACKOFF_MAX_S"):
        with pytest.raises(SettingsError, match=f"{old} is no longer read.*REDELIVERY.*RETRY"):
            WorkerAdapterSettings.from_env({old: "1"})


async def test_max_steps_cap_reaches_the_planner() -> None:
    """Bug: the executor accepted max_steps up to CONDUCTOR_MAX_STEPS_CAP, the planner rejected above its own 10."""
    env = {"CONDUCTOR_MAX_STEPS_CAP": "12"}
    assert ExecutorSettings.from_env(env).max_steps_cap == PlannerSettings.from_env(env).max_steps_cap == 12
    pool = load_pool(None)
    planner = Planner(PlannerSettings.from_env(env), None)
    reply = await planner.plan(request(pool.cards(pool.workers), max_steps=12))
    assert reply.error is None and reply.workflow is not None


def test_serve_exits_2_on_a_malformed_service_setting(capsys, monkeypatch) -> None:
    from conductor.app.cli import main

    monkeypatch.setenv("CONDUCTOR_PLANNER_RESAMPLES", "many")
    assert main(["serve", "planner"]) == 2
    assert "CONDUCTOR_PLANNER_RESAMPLES='many': not an integer" in capsys.readouterr().err


class _Probe(msgspec.Struct, frozen=True, kw_only=True):
    flag: Annotated[bool, Env("P_FLAG", "a flag")] = False
    count: Annotated[Count, Env("P_COUNT", "a count")] = 3
    ratio: Annotated[float | None, Env("P_RATIO", "a ratio")] = None
    computed: Annotated[int, Env("P_COMPUTED", "from the machine", fallback=lambda: 42)] = 0
    budget: Annotated[Budget, EnvFields({"max_calls": Env("P_CALLS", "calls")})] = Budget()


@pytest.mark.parametrize("raw", ["1", "true", "YES", "on", " On "])
def test_one_spelling_set_for_true(raw: str) -> None:
    assert read(_Probe, {"P_FLAG": raw}).flag is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "OFF"])
def test_one_spelling_set_for_false(raw: str) -> None:
    assert read(_Probe, {"P_FLAG": raw, "P_COUNT": "1"}).flag is False


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"P_FLAG": "maybe"}, "P_FLAG='maybe': expected one of"),
        ({"P_COUNT": "1e3"}, "P_COUNT='1e3': not an integer"),
        ({"P_COUNT": "0"}, "P_COUNT='0': Expected `int` >= 1"),
        ({"P_RATIO": "nan"}, "P_RATIO='nan': not a finite number"),
        ({"P_RATIO": "half"}, "P_RATIO='half': not a number"),
        ({"P_CALLS": "x"}, "P_CALLS='x': not an integer"),
    ],
)
def test_a_malformed_value_is_a_typed_error_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read(_Probe, env)


def test_empty_is_unset_fallbacks_compute_defaults_and_wire_types_read_field_by_field() -> None:
    probe = read(_Probe, {"P_COUNT": "", "P_RATIO": " ", "P_CALLS": "4"})
    assert (probe.count, probe.ratio, probe.computed, probe.budget) == (3, None, 42, Budget(max_calls=4))
    assert read(_Probe, {"P_COMPUTED": "5", "P_RATIO": "0.5"}).computed == 5
    assert [r.env for r in settings_table(_Probe)] == [
        "P_FLAG",
        "P_COUNT",
        "P_RATIO",
        "P_COMPUTED",
        "P_CALLS",
    ]
