"""Issue 19, item 6: bad input to the CLI is one clear line and a nonzero exit — never a traceback or a hang."""

from __future__ import annotations

import asyncio
import io
import socket
import subprocess
import sys
import time

import nats
import pytest
from nats.js import api

from conductor.app.cli import main
from conductor.credentials import write
from conductor.natsserver import NatsServer, free_port
from schemas.tasks import Names


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "conductor.app.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("command", [["solve", "What is 2+2?"], ["result", "t-1"]])
def test_nats_unreachable_is_one_line_within_the_connect_timeout(command):
    started = time.monotonic()
    done = _run(
        *command, env={"NATS_URL": f"nats://127.0.0.1:{free_port()}", "CONDUCTOR_NATS_CREDENTIALS": ""}
    )
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
        (["solve", "q", "--max-steps", "0"], "--max-steps: must be at least 1, not 0"),  # ran 5 steps before
        (["solve", "q", "--rounds", "-1"], "--rounds: must be 0 or more, not -1"),
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


# --- what the CLI is handed: credentials, pool files, input files, ports, a full store (issue 19, item 6) -------


def _one_line(err: str) -> str:
    assert err.strip().count("\n") == 0 and "Traceback" not in err, err
    return err.strip()


@pytest.fixture
def offline(monkeypatch):
    """No NATS server anywhere and no credentials from the environment the tests run in."""
    monkeypatch.setenv("NATS_URL", f"nats://127.0.0.1:{free_port()}")
    monkeypatch.delenv("CONDUCTOR_NATS_CREDENTIALS", raising=False)
    monkeypatch.delenv("CONDUCTOR_POOL", raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("content", "mode", "says"),
    [
        (None, 0o600, "cannot read the NATS credentials file {path}: No such file or directory"),
        (b"NATS_PASSWORD_CLIENT=x\n", 0o644, "{path} is readable by others (mode 644); chmod 600 it"),
        (b"some text\n", 0o600, "{path} is not a NATS credentials file (no NATS_PASSWORD_<USER>=... lines)"),
        (b"NATS_PASSWORD_EXECUTOR=x\n", 0o600, "{path} holds no password for the NATS user 'client'"),
        (b"\xff\xfe\x00binary", 0o600, "the NATS credentials file {path} is not text"),
    ],
    ids=["missing", "loose", "malformed", "no-user", "binary"],
)
@pytest.mark.parametrize("command", [["result", "t-1"], ["solve", "q"]])
def test_an_unfit_credentials_file_is_one_line(content, mode, says, command, offline, tmp_path, capsys):
    """Failed before: a CredentialsError traceback, exit 1."""
    path = tmp_path / "credentials"
    if content is not None:
        path.write_bytes(content)
        path.chmod(mode)
    offline.setenv("CONDUCTOR_NATS_CREDENTIALS", str(path))
    assert main(command) == 2
    assert _one_line(capsys.readouterr().err) == f"conductor {command[0]}: {says.format(path=path)}"


@pytest.fixture(scope="module")
def secured():
    with NatsServer.secured() as server:
        yield server


def _wrong_password(tmp_path, user: str):
    return write(tmp_path / "wrong", {user: "not-the-password"})


@pytest.mark.nats
@pytest.mark.parametrize("url_user", [False, True], ids=["credentials-file", "user-in-url"])
def test_a_wrong_password_is_named_as_such_and_at_once(url_user, secured, offline, tmp_path, capsys):
    """Failed before: "cannot reach NATS ... (ConnectionResetError)" after the whole 5 s connect timeout."""
    if url_user:
        offline.setenv("NATS_URL", secured.url.replace("nats://", "nats://client:wrong@"))
    else:
        offline.setenv("NATS_URL", secured.url)
        offline.setenv("CONDUCTOR_NATS_CREDENTIALS", str(_wrong_password(tmp_path, "client")))
    started = time.monotonic()
    assert main(["result", "t-1"]) == 2
    assert time.monotonic() - started < 4
    err = _one_line(capsys.readouterr().err)
    assert (
        err
        == f"conductor result: NATS at {secured.url} refused the credentials of user 'client' (Authorization Violation)"
    )


@pytest.mark.nats
def test_serve_with_a_wrong_password_is_one_line(secured, tmp_path):
    """Failed before: a traceback from inside FastStream's connect, exit 1."""
    done = _run(
        "serve",
        "executor",
        env={
            "NATS_URL": secured.url,
            "CONDUCTOR_METRICS_PORT": "off",
            "CONDUCTOR_NATS_CREDENTIALS": str(_wrong_password(tmp_path, "executor")),
        },
    )
    assert done.returncode == 2
    assert _one_line(done.stderr) == (
        f"conductor serve: NATS at {secured.url} refused the credentials of user 'executor' (Authorization Violation)"
    )


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("missing.toml", None, "cannot read pool file {path}: No such file or directory"),
        ("bad.toml", b"workers = [\n", "{path}: pool file is not valid TOML: "),
        ("pool.json", b'{"workers": []}\n', "{path}: pool file is not valid TOML: "),
        (
            "unknown.toml",
            b'[[workers]]\nname = "a"\nprovider = "gemini"\nmodel = "m"\n',
            "{path}: pool file: workers[0].provider: Invalid enum value 'gemini'",
        ),
        ("binary.toml", b"\xff\xfe\x00\x01", "pool file {path} is not UTF-8 text"),
    ],
    ids=["missing", "malformed-toml", "json", "unknown-provider", "binary"],
)
@pytest.mark.timeout(60)
def test_serve_with_a_bad_pool_file_is_one_line(name, content, says, offline, tmp_path, capsys):
    """Failed before: a PoolError (or UnicodeDecodeError) traceback, exit 1; the file was not named."""
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    assert main(["serve", "all", "--pool", str(path)]) == 2
    assert _one_line(capsys.readouterr().err).startswith(f"conductor serve: {says.format(path=path)}")


def test_verify_a_missing_file_is_one_line(tmp_path, capsys):
    """Failed before: a FileNotFoundError traceback."""
    assert main(["verify", str(tmp_path / "nope.jsonl")]) == 2
    err = _one_line(capsys.readouterr().err)
    assert err == f"conductor verify: cannot read {tmp_path / 'nope.jsonl'}: No such file or directory"


def test_verify_binary_stdin_is_one_line(monkeypatch, capsys):
    """Failed before: a UnicodeEncodeError traceback from deep in the decoder."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"id": "1"}\n\xff\xfe\x80\n')))
    assert main(["verify", "-"]) == 2
    assert _one_line(capsys.readouterr().err) == (
        "conductor verify: stdin is not UTF-8 text (byte 0xff at offset 12); expected JSON lines of VerifyRequest"
    )


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.nats
@pytest.mark.parametrize(
    ("service", "variable", "extra"),
    [
        (
            "gateway",
            "CONDUCTOR_GATEWAY_PORT",
            {
                "CONDUCTOR_GATEWAY_HOST": "127.0.0.1",
                "CONDUCTOR_METRICS_PORT": "off",
                "CONDUCTOR_GATEWAY_ALLOW_ANONYMOUS": "true",
            },
        ),
        ("executor", "CONDUCTOR_METRICS_PORT", {"CONDUCTOR_METRICS_HOST": "127.0.0.1"}),
    ],
    ids=["gateway", "metrics"],
)
def test_serve_on_a_port_in_use_is_one_line(service, variable, extra, taken_port, nats_url, subject_prefix):
    """Failed before: an OSError traceback from inside the event loop's create_server."""
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_NATS_CREDENTIALS": "",
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        variable: str(taken_port),
        **extra,
    }
    done = _run("serve", service, env=env)
    assert done.returncode == 2
    err = _one_line(done.stderr)
    assert err == f"conductor serve: {variable}={taken_port}: 127.0.0.1:{taken_port} is already in use"


@pytest.fixture
def on_nats(monkeypatch, nats_url, subject_prefix):
    monkeypatch.setenv("NATS_URL", nats_url)
    monkeypatch.setenv("CONDUCTOR_SUBJECT_PREFIX", subject_prefix)
    monkeypatch.delenv("CONDUCTOR_NATS_CREDENTIALS", raising=False)
    return subject_prefix


@pytest.mark.nats
def test_a_durable_submit_to_a_full_store_is_one_line(on_nats, nats_url, capsys):
    """Failed before: a ServiceUnavailableError traceback ("maximum bytes exceeded")."""
    names = Names.for_prefix(on_nats)

    async def tiny_queue() -> None:  # the task queue with no room for a task
        nc = await nats.connect(nats_url)
        await nc.jetstream().add_stream(
            name=names.tasks_stream, subjects=[names.submit("*")], max_bytes=64, discard=api.DiscardPolicy.NEW
        )
        await nc.close()

    asyncio.run(tiny_queue())
    assert main(["solve", "What is 2+2?", "--detach"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert err.startswith(
        f"conductor solve: the durable task queue {names.tasks_stream} refused the task: the NATS "
        "JetStream store is full: maximum bytes exceeded (JetStream error "
    )


@pytest.mark.nats
def test_nothing_serving_is_one_line(on_nats, capsys):
    """Failed before: a NoRespondersError (or NoStreamResponseError) traceback when no executor ever ran."""
    assert main(["solve", "What is 2+2?"]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"conductor solve: nothing serves {on_nats}conductor.solve (no executor is running: `conductor serve all`)"
    )
    assert main(["solve", "What is 2+2?", "--detach"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "does not exist (no executor started with this subject prefix" in err


@pytest.mark.parametrize("command", [["result", "t-1"], ["solve", "q"], ["solve", "q", "--detach"]])
def test_a_malformed_setting_is_one_line(command, offline, capsys):
    """Failed before (issue 34): a SettingsError traceback, exit 1."""
    offline.setenv("CONDUCTOR_MAX_PAYLOAD_BYTES", "abc")
    assert main(command) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"conductor {command[0]}: CONDUCTOR_MAX_PAYLOAD_BYTES='abc': not an integer"
    )


@pytest.mark.nats
@pytest.mark.parametrize(
    "stored", [b'{"stream":"CONDUCTOR_TASKS","seq":1}', b'{"task_id":"t-1","tenant":"beta"}']
)
def test_result_on_an_entry_that_is_not_the_result_is_one_line(stored, on_nats, nats_url, capsys):
    """Failed before (issue 34): a DecodeError traceback for a reflected PubAck; another tenant's result shown as
    this one's."""
    names = Names.for_prefix(on_nats)

    async def plant() -> None:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        kv = await js.create_key_value(bucket=names.results_bucket, direct=True)
        await kv.put("client.t-1", stored)
        await nc.close()

    asyncio.run(plant())
    assert main(["result", "t-1"]) == 4
    assert _one_line(capsys.readouterr().err) == (
        "conductor result: no result for task t-1 yet (the entry stored under its name is not its result: ignored)"
    )


@pytest.mark.nats
def test_a_duplicate_detached_submission_is_one_line(on_nats, nats_url, capsys):
    """Failed before (issue 34): the second submission printed the id and exited 0, though JetStream dropped it."""
    names = Names.for_prefix(on_nats)

    async def queue() -> None:
        nc = await nats.connect(nats_url)
        await nc.jetstream().add_stream(name=names.tasks_stream, subjects=[names.submit("*")])
        await nc.close()

    asyncio.run(queue())
    assert main(["solve", "q", "--detach", "--task-id", "d-1"]) == 0
    assert capsys.readouterr().out.strip() == "d-1"
    assert main(["solve", "q", "--detach", "--task-id", "d-1"]) == 2
    assert "task d-1 was already submitted by tenant client" in _one_line(capsys.readouterr().err)


@pytest.mark.nats
def test_result_before_any_executor_made_the_bucket_is_one_line(on_nats, capsys):
    """Failed before: a nats TimeoutError traceback (a JetStream server lets a read of a missing stream time out)."""
    assert main(["result", "t-1"]) == 4
    assert "no results bucket" in _one_line(capsys.readouterr().err)
