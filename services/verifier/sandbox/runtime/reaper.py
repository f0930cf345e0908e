"""End a sample completely: kill its whole process tree at once, remove its SysV IPC objects, measure its CPU.

A candidate's processes all run under the slot's candidate uid, in new sessions if they like (``setsid``), so
neither a process group nor a parent chain finds them all. What does: ``kill(-1, SIGKILL)`` sent *as that uid*.
The kernel delivers it to every process the sender may signal while holding the task-list lock that ``fork``
also takes, and a fork whose parent has a pending SIGKILL is aborted, so a fork bomb cannot outrun it (killing
pid by pid can lose that race and used to end in "processes survive SIGKILL", an error verdict that training
would mask). The supervisor is root, so a short-lived helper drops to the uid to send it. The same helper
removes the sample's shared-memory segments, message queues and semaphores, which live in the sandbox's own IPC
namespace and would otherwise be seen by the next sample.
"""

from __future__ import annotations

import contextlib
import os
import signal

IPC_RMID = 0
SYSVIPC = (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl"))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Fatal(Exception):
    """The supervisor lost control of its sandbox (zygote gone, processes unkillable): the host must respawn it."""


def ipc_ids() -> dict[str, list[int]]:
    """Ids of every SysV IPC object in this IPC namespace, by kind (from /proc/sysvipc)."""
    found: dict[str, list[int]] = {}
    for kind, _ in SYSVIPC:
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        ids = [int(row.split()[1]) for row in rows if len(row.split()) > 1]
        if ids:
            found[kind] = ids
    return found


def remove_ipc(found: dict[str, list[int]]) -> None:
    """IPC_RMID each object (the caller must own them: the helper runs as the candidate uid)."""
    import ctypes  # only loaded in the helper, and only when there is something to remove

    libc = ctypes.CDLL(None, use_errno=True)
    for kind, call in SYSVIPC:
        for ident in found.get(kind, []):
            if kind == "sem":
                libc.semctl(ident, 0, IPC_RMID)
            else:
                getattr(libc, call)(ident, IPC_RMID, None)


def reap(uid: int | None, kill: bool) -> None:
    """As ``uid`` (or as ourselves when candidates share our uid): kill every process of it, remove IPC objects."""
    leftovers = ipc_ids()
    if not kill and not leftovers:
        return
    if uid is None:  # no separate uid: only the IPC objects can be removed safely from here
        with contextlib.suppress(OSError):
            remove_ipc(leftovers)
        return
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(-1, signal.SIGKILL)
            remove_ipc(leftovers)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def stat_fields(pid: int) -> list[bytes] | None:
    """Fields of /proc/<pid>/stat after the command name (which may contain spaces and parentheses)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(pids: list[int], own_only: bool = False) -> float:
    """CPU time of these processes (utime + stime) and, unless ``own_only``, of the children they have reaped."""
    ticks = 0
    last = 13 if own_only else 15
    for pid in pids:
        fields = stat_fields(pid)
        if fields and len(fields) > 14:
            ticks += sum(int(f) for f in fields[11:last])
    return ticks / CLOCK_TICKS


PAGE = os.sysconf("SC_PAGE_SIZE")


def anon_resident(pid: int) -> int:
    """Bytes of anonymous resident memory of a process (statm: resident minus shared file-backed pages), 0 if gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            fields = fh.read().split()
    except OSError:
        return 0
    return max(0, int(fields[1]) - int(fields[2])) * PAGE if len(fields) > 2 else 0
