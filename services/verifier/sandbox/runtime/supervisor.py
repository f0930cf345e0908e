"""The supervisor: pid 2 of one bubblewrap sandbox, serving run requests from the host one at a time.

It forks a candidate zygote at start-up, before it has seen any job, so every candidate process is a fork of a
memory image that never held a test or an expected output. Candidates run under one uid, the HumanEval tester under
another, the supervisor itself as root without most capabilities: a candidate can neither signal nor read the
processes that judge it. The jobs themselves (one per op, with their limits and output caps) are in ``jobs``;
after every job the supervisor kills every process in the sandbox but itself, the zygote and init, then wipes /tmp.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import time

import frames
import jobs
import reaper
from reaper import Fatal

ZYGOTE_WAIT = 10.0
KILL_WAIT = 10.0  # how long killed processes may take to exit before the sandbox counts as lost
KEEP_ENV = {
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "PYTHONHASHSEED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONIOENCODING",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "MPLBACKEND",
    "TMPDIR",
    "PYTHONUNBUFFERED",
    "PWD",
}


class Sandbox:
    """State shared by all jobs: configuration, the zygote's socket and the processes to spare when cleaning up."""

    def __init__(self, config: dict) -> None:
        self.config = config
        self.cand_uid = config.get("cand_uid")
        self.test_uid = config.get("test_uid")
        # Sweeping "every other process" is only safe in a pid namespace we own: the host must say so *and* we must
        # look like it (pid 1-3), never inferred from a small pid alone (a container's pid 2 is not a sandbox).
        self.pidns = bool(config.get("own_pidns")) and os.getpid() <= 3
        self.protected = {1, os.getpid()}
        self.scratch = config["scratch"]
        private = config.get("private_tmp", False) and self.pidns
        self.wipe_roots = ["/tmp", "/dev/shm"] if private else [self.scratch]
        # Read-only binds that live under a wiped root (a venv checked out under /tmp): never walked or wiped.
        self.keep = [str(p) for p in config.get("keep", [])]
        self.zsock: socket.socket | None = None
        self.zpid = 0
        self.tester_proc: dict | None = None
        self.job_id = 0

    # ---- the zygote -------------------------------------------------------------------------------------------
    def start_zygote(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            parent.close()
            zygote_main(child, self.config)
        child.close()
        self.zsock, self.zpid = parent, pid
        self.protected.add(pid)
        ready = self.zsock.recv(1024)
        if ready != b"ready":
            raise Fatal("zygote did not start")

    def spawn(self, mode: str, limits: dict, cwd: str) -> dict:
        """Ask the zygote for a confined candidate; returns our ends of its pipes and its pid."""
        ours, theirs = {}, []
        for name, child_reads in (
            ("stdin", True),
            ("stdout", False),
            ("stderr", False),
            ("ctl", True),
            ("res", False),
        ):
            r, w = os.pipe()
            ours[name] = w if child_reads else r
            theirs.append(r if child_reads else w)
        spec = {"mode": mode, "limits": limits, "cwd": cwd, "uid": self.cand_uid}
        try:
            socket.send_fds(self.zsock, [json.dumps(spec).encode()], theirs)  # type: ignore[arg-type]
        finally:
            for fd in theirs:
                os.close(fd)
        reply = self._zygote_notice(ZYGOTE_WAIT)
        ours["pid"] = reply["pid"]
        return ours

    def _zygote_notice(self, timeout: float) -> dict:
        self.zsock.settimeout(timeout)  # type: ignore[union-attr]
        try:
            data = self.zsock.recv(4096)  # type: ignore[union-attr]
        except (TimeoutError, OSError) as exc:
            raise Fatal(f"zygote unresponsive: {exc}") from exc
        if not data:
            raise Fatal("zygote exited")
        return json.loads(data)

    def wait_exit(self) -> int:
        return self._zygote_notice(ZYGOTE_WAIT)["exit"]

    # ---- cleanup ----------------------------------------------------------------------------------------------
    def kill_all(self) -> None:
        """SIGKILL every process of this sandbox except init, the supervisor, the zygote and the tester, and remove
        the sample's SysV IPC objects.

        A sample that left nothing running costs no more than a look at /proc. Anything that is still running after
        one direct SIGKILL each — a tree that forks as fast as we kill — goes in one atomic ``kill(-1)`` sent as the
        candidate uid (see reaper); the loop then waits for the dead to exit and catches anything else.
        """
        deadline, pause, rounds = time.monotonic() + KILL_WAIT, 0.0005, 0
        while True:
            alive = [pid for pid in self._other_pids() if not _is_zombie(pid)]
            if not alive:
                break
            if time.monotonic() > deadline:
                raise Fatal(f"{len(alive)} processes survive SIGKILL for {KILL_WAIT:.0f}s")
            if rounds == 1 and self.cand_uid is not None:
                reaper.reap(self.cand_uid, kill=True)
            else:
                for pid in alive:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            rounds += 1
            time.sleep(
                pause
            )  # a killed process still needs CPU time to exit; on a loaded host that takes a while
            pause = min(pause * 2, 0.01)
        reaper.reap(self.cand_uid, kill=False)  # SysV IPC objects: a helper is forked only when there are any

    # ---- the long-lived HumanEval tester -------------------------------------------------------------------------
    def tester(self) -> dict:
        if self.tester_proc is None:
            self.tester_proc = jobs.start_tester(self)
            self.protected.add(self.tester_proc["pid"])
        return self.tester_proc

    def stop_tester(self) -> None:
        proc, self.tester_proc = self.tester_proc, None
        if proc is None:
            return
        self.protected.discard(proc["pid"])
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc["pid"], signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(proc["pid"], 0)
        for name in ("job", "result"):
            os.close(proc[name])
        proc["sock"].close()

    def _other_pids(self) -> list[int]:
        if not self.pidns:  # without a pid namespace only the candidate's own uid is safe to sweep
            return [
                pid
                for pid in _proc_pids()
                if _uid_of(pid) in (self.cand_uid, self.test_uid)
                and pid not in self.protected
                and self.cand_uid is not None
            ]
        return [pid for pid in _proc_pids() if pid not in self.protected]

    def fresh_dirs(self) -> tuple[str, str]:
        """Wipe the scratch roots, then make one private working dir per role.

        Only a private /tmp is ever wiped: the host says so (bubblewrap backend) *and* we must be in our own pid
        namespace; otherwise the scratch root is a directory the host created for this sandbox alone.
        """
        for root in self.wipe_roots:
            if os.path.isdir(root):
                for entry in os.listdir(root):
                    path = os.path.join(root, entry)
                    if any(k == path or k.startswith(path + "/") for k in self.keep):
                        continue
                    if os.path.isdir(path) and not os.path.islink(path):
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        with contextlib.suppress(OSError):
                            os.unlink(path)
        dirs = []
        for name, uid in (("work", self.cand_uid), ("tester", self.test_uid)):
            path = os.path.join(self.scratch, name)
            os.mkdir(path, 0o700)
            if uid is not None:
                os.chown(path, uid, uid)
            dirs.append(path)
        return dirs[0], dirs[1]


def _proc_pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def _uid_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True


# ---- the zygote -------------------------------------------------------------------------------------------------
def zygote_main(sock: socket.socket, config: dict) -> None:
    """Fork candidates on request. Runs in a process forked before any job arrived; never returns."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    if config.get("site", True):
        import site

        site.main()
    import candidate
    import unittest_harness  # noqa: F401

    for name in config.get("preload", []):
        with contextlib.suppress(Exception):
            __import__(name)
    import gc

    gc.freeze()  # children start with every inherited object out of the collector's reach: fewer copy-on-write faults
    sock.send(b"ready")
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 8)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        spec = json.loads(msg)
        pid = os.fork()
        if pid == 0:
            sock.close()
            candidate.main(spec, fds)
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        sock.send(json.dumps({"exit": status}).encode())


def fitted(reply: dict) -> bytes:
    """The reply as one frame the host accepts. Output of many control or invalid bytes grows when escaped (a NUL
    becomes six bytes of JSON), so a job can end up larger than the host's frame limit: that is the program's
    output being too large, reported as such rather than as a broken sandbox."""
    frame = frames.encode(reply)
    if len(frame) <= frames.DEFAULT_MAX:
        return frame
    slim = {k: v for k, v in reply.items() if k not in ("stdout", "stderr", "replies", "results")}
    return frames.encode({**slim, "status": "output_limit", "stdout": "", "stderr": "", "replies": []})


# ---- self-check of the isolation layers ---------------------------------------------------------------------------
def probe(sb: Sandbox) -> dict:
    """Check each isolation layer from the inside instead of trusting the flags the host passed."""
    config = sb.config
    layers = {
        "netns": {n for _, n in socket.if_nameindex()} <= {"lo"},
        "pidns": sb.pidns,
        "rofs": all(
            _readonly(p) for p in ("/", "/usr", os.path.dirname(os.path.abspath(__file__)), sys.prefix)
        ),
        "hidden": all(not os.path.exists(p) for p in config.get("must_hide", [])),
        "env": set(os.environ) <= KEEP_ENV,
        "uid": sb.cand_uid is not None and _can_drop(sb.cand_uid),
        "rlimits": True,
        "seccomp": _seccomp_filtered(),
    }
    return layers


def _seccomp_filtered() -> bool:
    try:
        with open("/proc/self/status") as fh:
            return any(line.split() == ["Seccomp:", "2"] for line in fh)
    except OSError:
        return False


def _readonly(path: str) -> bool:
    probe_path = os.path.join(path, f".probe-{os.getpid()}")
    try:
        fd = os.open(probe_path, os.O_CREAT | os.O_WRONLY, 0o600)
    except OSError:
        return True
    os.close(fd)
    os.unlink(probe_path)
    return False


def _can_drop(uid: int) -> bool:
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os._exit(0 if os.getuid() == uid else 1)
        except BaseException:  # any failure means the layer is missing
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return status == 0


def main() -> None:
    config = json.loads(sys.argv[1])
    sb = Sandbox(config)
    if sb.cand_uid is not None and not _can_drop(sb.cand_uid):
        sb.cand_uid = sb.test_uid = None
    layers = probe(sb)
    sb.start_zygote()
    frames.write(1, {"hello": True, "layers": layers, "pid": os.getpid()})
    while True:
        try:
            req = frames.read(0)
        except frames.FrameError:
            os._exit(0)
        try:
            reply = jobs.JOBS[req["op"]](sb, req)
        except Fatal as exc:
            frames.write(1, {"fatal": str(exc)})
            os._exit(3)
        frames.write_bytes(1, fitted(reply))
