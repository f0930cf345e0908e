"""Start, probe and stop one vLLM OpenAI-compatible server process (stdlib and msgspec only: runs in .venv).

Shared by the ``make test-vllm`` driver (scripts/vllm/run.py), which owns the server for the tier, and the outage
test (tests/e2e/test_vllm.py), which kills it mid-run and starts it again on the same port. What the driver started
is written to a small JSON *state file* (argv, port, pid, log), so whoever restarts the server records the new pid
there and the driver's clean-up always stops the live process, even after a restart or a failed run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import msgspec

READY_TIMEOUT_S = 900.0  # ~2 min on an idle 2-core machine; much more when the CPU is shared
STOP_GRACE_S = 20.0


class ServerError(RuntimeError):
    """The server did not start, died while starting, or did not become ready in time; the log tail is attached."""


class ServerState(msgspec.Struct, kw_only=True):
    argv: list[str]
    port: int
    log: str
    pid: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(msgspec.json.encode(self))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> ServerState:
        return msgspec.json.decode(path.read_bytes(), type=cls)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A fixed KV-cache size instead of vLLM's CPU default (a fraction of the NUMA node's memory, refused at start-up
# when other processes use it, as they do on a shared machine). 2 GiB holds ~45k tokens of SmolLM2-135M context
# (30 layers x 3 KV heads x 64 dims x K,V x float32 = 46 KB/token): dozens of concurrent requests.
KV_CACHE_BYTES = 2 * 1024**3
SERVED_NAME = (
    "smollm2-135m-instruct"  # the model name clients send (pool files, CONDUCTOR_POLICY=openai:NAME)
)


def server_argv(python: str, model_dir: str, port: int, name: str = SERVED_NAME) -> list[str]:
    """float32: the dtype the CPU backend runs this model in; a short served name instead of the directory path."""
    return [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--served-model-name",
        name,
        "--dtype",
        "float32",
        "--kv-cache-memory-bytes",
        str(KV_CACHE_BYTES),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


def start(state: ServerState) -> subprocess.Popen[bytes]:
    """Launch in a new session (its own process group), so stopping it also stops vLLM's engine workers."""
    with open(state.log, "ab") as log:
        proc = subprocess.Popen(state.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    state.pid = proc.pid
    return proc


def ready(url: str, timeout_s: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=timeout_s) as resp:
            return resp.status == 200 and bool(json.loads(resp.read()).get("data"))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_ready(
    state: ServerState, proc: subprocess.Popen[bytes] | None, timeout_s: float = READY_TIMEOUT_S
) -> float:
    """Seconds until ``/v1/models`` lists the model; ``ServerError`` if the process exits first or time runs out."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if proc is not None and proc.poll() is not None:
            raise ServerError(
                f"vLLM server exited with code {proc.returncode} while starting\n{log_tail(state)}"
            )
        if ready(state.url):
            return time.monotonic() - started
        time.sleep(2.0)
    raise ServerError(f"vLLM server not ready after {timeout_s:.0f}s\n{log_tail(state)}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill(pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    """Signal the server's whole process group (it was started as a session leader)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def stop(pid: int, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; returns once the process is gone (reaped by its parent or not)."""
    if pid <= 0:
        return
    kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if _reaped_or_gone(pid):
            return
        time.sleep(0.2)
    kill(pid, signal.SIGKILL)
    while not _reaped_or_gone(pid) and time.monotonic() < deadline + 10:
        time.sleep(0.2)


def _reaped_or_gone(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return True
    except ChildProcessError:
        pass  # not our child: only existence can be checked
    return not alive(pid) or _zombie(pid)


def _zombie(pid: int) -> bool:
    """A killed process that is not our child stays a zombie until its parent (or init) reaps it: it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def log_tail(state: ServerState, lines: int = 30) -> str:
    try:
        text = Path(state.log).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no log at {state.log})"
    return "\n".join(f"  | {line}" for line in text.splitlines()[-lines:])
