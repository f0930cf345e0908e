"""Issue 19, item 6: bad input to the CLI is one clear line and a nonzero exit — never a traceback or a hang."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from conductor.app.cli import main
from conductor.natsserver import free_port


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "conductor.app.cli", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})  # fmt: skip


@pytest.mark.parametrize("command", [["solve", "What is 2+2?"], ["result", "t-1"]])
def test_nats_unreachable_is_one_line_within_the_connect_timeout(command):
    started = time.monotonic()
    done = _run(*command, env={"NATS_URL": f"nats://127.0.0.1:{free_port()}", "CONDUCTOR_NATS_CREDENTIALS": ""})
    assert time.monotonic() - started < 30
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "cannot reach NATS" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["solve", "q", "--task-id", "a.*.>"], "task_id must be"),
        (["result", "*"], "task_id must be"),
        (["solve", "q", "--policy", "mixture"], "unknown strategy 'mixture'"),
    ],
)
def test_a_bad_argument_is_refused_before_anything_is_sent(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.strip().count("\n") == 0


@pytest.mark.parametrize("flag", ["--limit", "--repeats", "--concurrency"])
@pytest.mark.parametrize("value", ["-1", "0", "x"])
def test_eval_counts_must_be_positive(flag, value, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "--benchmark", "sim", "--out", "/tmp/never", flag, value])
    assert exit_.value.code == 2 and flag in capsys.readouterr().err
