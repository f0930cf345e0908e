"""Issue 19, item 6: what `conductor serve` checks before it serves — the pool's sim datasets, the workers' API-key
variables (an error unless allowed), an `openai:` policy's endpoint — each one line and exit 2; and while NATS is
unreachable at start, every retry is a log line and a signal still stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from importlib import resources

import pytest

from conductor.app.cli import build_parser, main
from conductor.natsserver import free_port
from services.worker_adapter.app import create_service as worker_adapter

DEMO_POOL = resources.files("conductor.data").joinpath("demo_pool.toml").read_text(encoding="utf-8")
KEYED_POOL = """
[[workers]]
name = "gpt"
provider = "openai"
model = "gpt-5"

[[workers]]
name = "vllm"
provider = "openai_compatible"
model = "qwen"
base_url = "http://127.0.0.1:1/v1"
api_key_env = "TEST_VLLM_KEY"

[[workers]]
name = "local-vllm"
provider = "openai_compatible"
model = "qwen"
base_url = "http://127.0.0.1:1/v1"
"""


@pytest.fixture
def env(monkeypatch):
    for name in (
        "CONDUCTOR_POOL",
        "CONDUCTOR_NATS_CREDENTIALS",
        "OPENAI_API_KEY",
        "TEST_VLLM_KEY",
        "CONDUCTOR_ALLOW_MISSING_KEYS",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NATS_URL", f"nats://127.0.0.1:{free_port()}")  # never reached: the checks come first
    # Were a check missing, `serve` would go on to connect and wait for NATS for ever, in the test's own process;
    # a credentials file that does not exist stops it there instead (the checks come before any connection).
    monkeypatch.setenv("CONDUCTOR_NATS_CREDENTIALS", "/nonexistent/conductor-credentials")
    return monkeypatch


def _one_line(err: str) -> str:
    assert err.strip().count("\n") == 0 and "Traceback" not in err, err
    return err.strip()


def test_a_missing_sim_dataset_stops_serve_at_start(env, tmp_path, capsys):
    """Failed before: `serve` started; the worker's first call failed with "sim dataset ... is unreadable"."""
    pool = tmp_path / "pool.toml"
    pool.write_text(DEMO_POOL.replace('dataset = "demo_questions.jsonl"', 'dataset = "gone.jsonl"'))
    assert main(["serve", "worker-adapter", "--pool", str(pool)]) == 2  # the service that reads them
    assert _one_line(capsys.readouterr().err) == (
        f"conductor serve: workers[0] ('sim-frontier'): sim dataset {tmp_path / 'gone.jsonl'}: No such file or directory"
    )


def test_a_missing_api_key_stops_serve_at_start(env, tmp_path, capsys):
    """Failed before: a warning in the log, and every call of those workers failed."""
    pool = tmp_path / "pool.toml"
    pool.write_text(KEYED_POOL)
    assert main(["serve", "worker-adapter", "--pool", str(pool)]) == 2
    assert _one_line(capsys.readouterr().err) == (
        "conductor serve: API keys not set: 'gpt' needs OPENAI_API_KEY, 'vllm' needs TEST_VLLM_KEY; set them, or "
        "CONDUCTOR_ALLOW_MISSING_KEYS=1 to start anyway (those workers' calls fail)"
    )


def test_missing_keys_may_be_allowed_explicitly(tmp_path):
    pool = tmp_path / "pool.toml"
    pool.write_text(KEYED_POOL)
    svc = worker_adapter({"CONDUCTOR_POOL": str(pool), "CONDUCTOR_ALLOW_MISSING_KEYS": "1"})
    assert svc.pool.names() == ["gpt", "vllm", "local-vllm"]
    svc = worker_adapter({"CONDUCTOR_POOL": str(pool), "OPENAI_API_KEY": "sk-x", "TEST_VLLM_KEY": "k"})
    assert svc.pool.names() == ["gpt", "vllm", "local-vllm"]  # every key there: no setting needed


def _serve(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "conductor.app.cli", "serve", *args],
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "CONDUCTOR_NATS_CREDENTIALS": "",
            "CONDUCTOR_LOG_JSON": "1",
            "CONDUCTOR_METRICS_PORT": "off",
            **env,
        },
    )


@pytest.mark.nats
def test_an_unreachable_policy_endpoint_stops_serve_at_start(nats_url, subject_prefix):
    """Failed before: the planner started; every plan fell back to MoA and nothing said why."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    proc = _serve(
        "planner",
        env={
            "NATS_URL": nats_url,
            "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
            "CONDUCTOR_POLICY": "openai:smol",
            "CONDUCTOR_POLICY_BASE_URL": url,
        },
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    said, refused = err.strip().splitlines()  # which Conductor serves (said as it starts), then why it cannot
    assert said == "conductor serve: Conductor: openai:smol (CONDUCTOR_POLICY)" and "Traceback" not in err
    assert refused.startswith(
        f"conductor serve: CONDUCTOR_POLICY=openai:smol: the policy endpoint {url}/ is unreachable (APIConnectionError"
    )


def test_while_nats_is_unreachable_every_retry_is_logged_and_a_signal_stops_it():
    """Failed before: nothing at all on stderr while NATS did not answer, and SIGTERM was not obeyed (the signal only
    set the event the process would wait on once started)."""
    proc = _serve("executor", env={"NATS_URL": f"nats://127.0.0.1:{free_port()}"})
    assert proc.stderr is not None
    retries: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while len(retries) < 3 and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if "cannot reach NATS; retrying" in line:
                retries.append(line)
        assert [f'"attempt": {n}' in line for n, line in enumerate(retries, 1)] == [True] * 3, retries
        assert '"service": "executor"' in retries[0] and "ConnectionRefusedError" in retries[0]
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert rest.strip().splitlines()[-1] == "conductor serve: stopped before the services started"


def test_the_command_line_loads_no_plotting_library():
    """Every `conductor serve` process builds the whole command line; matplotlib (the eval report's charts) is
    loaded only where a report is written: it cost each service process ~50 MiB of resident memory."""
    code = (
        "import sys; from conductor.app.cli import build_parser; build_parser(); print(sorted(sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'matplotlib'" not in loaded and "'numpy'" not in loaded


def test_serve_parses_with_the_service_commands_alone():
    """`conductor serve` builds only the service commands (no other command's modules loaded), and parses what
    the whole command line parses."""
    code = (
        "import sys; from conductor.app.cli import build_parser; "
        "a = build_parser('serve').parse_args(['serve', 'executor', '--pool', 'p.toml']); "
        "print(a.service, a.pool, a.embedded_nats, sorted(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("executor p.toml False ")
    assert "'evaluation'" not in out and "'services.verifier.sandbox'" not in out
    whole = build_parser().parse_args(["serve", "executor", "--pool", "p.toml"])
    assert (whole.service, whole.pool, whole.embedded_nats) == ("executor", "p.toml", False)
