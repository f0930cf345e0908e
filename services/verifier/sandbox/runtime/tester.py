"""The HumanEval tester: runs the dataset's ``check`` in its own process, calling the candidate through a proxy.

The candidate lives in another process under another uid. It never sees ``check``'s expected values, cannot patch
``assert`` or the tester's builtins, and every value it returns arrives here as a plain builtin decoded from the
strict encoding, so an object with a rigged ``__eq__`` cannot exist on this side. Helper functions that ``check``
uses (``poly``, ``encode_cyclic``, ...) come from the dataset prompt, not from the candidate, so redefining them
in a completion changes nothing here.

The tester is long-lived (one per sandbox, forked once): it only ever runs dataset code and receives plain values,
so reusing it is safe and saves a fork per job. Each job gets a fresh namespace and its own pair of pipes to the
candidate, passed over a Unix socket.
"""

from __future__ import annotations

import builtins
import os
import socket

import frames
import values

JOB_FD = 3
RESULT_FD = 4
SOCK_FD = 5


class CandidateCrashed(Exception):
    """The candidate process went away or answered with garbage."""


class Unencodable(TypeError):
    """The candidate returned a value that is not a plain builtin."""


class HarnessLimit(BaseException):
    """An argument ``check`` passes cannot cross the boundary: our limitation, reported as an infrastructure error."""


def _rebuild(kind: str, message: str) -> BaseException:
    """Re-raise the candidate's exception as the builtin type of the same name (never a type it could define)."""
    cls = getattr(builtins, kind, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:  # exotic constructor signatures fall back to RuntimeError
            pass
    return RuntimeError(f"{kind}: {message}")


class Proxy:
    """Stands in for the candidate's function inside ``check``."""

    def __init__(self, name: str, call_fd: int, reply_fd: int) -> None:
        self.name = name
        self.__name__ = name
        self.call_fd = call_fd
        self.reply_fd = reply_fd

    def __call__(self, *args: object, **kwargs: object) -> object:
        try:
            call = {"name": self.name, "args": values.to_tree(list(args)), "kwargs": values.to_tree(kwargs)}
        except values.UnencodableValue as exc:
            raise HarnessLimit(f"check passed an argument that cannot cross the sandbox: {exc}") from None
        try:
            frames.write(self.call_fd, call)
            reply = frames.read(self.reply_fd)
        except (frames.FrameError, OSError, MemoryError) as exc:
            raise CandidateCrashed(f"candidate died or broke the protocol: {exc}") from None
        if not isinstance(reply, dict):
            raise CandidateCrashed("bad reply")
        if "ok" in reply:
            try:
                return values.from_tree(reply["ok"])
            except (values.MalformedValue, MemoryError, RecursionError) as exc:
                raise CandidateCrashed(f"bad value: {exc}") from None
        if "raised" in reply:
            raise _rebuild(*reply["raised"])
        raise Unencodable(reply.get("unencodable", "bad reply"))


def run(job: dict, call_fd: int, reply_fd: int) -> dict:
    try:
        ns: dict = {"__name__": "__tester__", "__builtins__": builtins}
        exec(compile(job["prompt"], "<prompt>", "exec"), ns)
        exec(compile(job["test"], "<test>", "exec"), ns)
        check = ns["check"]
    except BaseException as exc:  # the dataset's own code does not load: not the candidate's fault
        return {
            "passed": False,
            "error": f"test harness error: {type(exc).__name__}: {exc}"[:400],
            "harness": True,
        }
    proxy = Proxy(job["entry_point"], call_fd, reply_fd)
    ns[job["entry_point"]] = proxy  # checks may name the function directly, as if in one module with it
    try:
        loaded = frames.read(reply_fd)
    except (frames.FrameError, OSError) as exc:
        return {"passed": False, "error": f"candidate died while loading: {exc}"}
    if "load_error" in loaded:
        return {"passed": False, "error": "candidate failed to load: " + ": ".join(loaded["load_error"])}
    try:
        check(proxy)
    except HarnessLimit as exc:
        return {"passed": False, "error": str(exc), "harness": True}
    except BaseException as exc:  # any failure inside check is a failed test, described for the verdict
        return {"passed": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return {"passed": True, "error": ""}


def serve() -> None:
    """Loop in the confined tester process: fds arrive on the socket, the job on the job pipe; never returns."""
    sock = socket.socket(fileno=SOCK_FD)
    while True:
        try:
            _, fds, _, _ = socket.recv_fds(sock, 64, 2)
            job = frames.read(JOB_FD)
        except (OSError, frames.FrameError):
            os._exit(0)
        call_fd, reply_fd = fds
        os.set_blocking(call_fd, True)  # the supervisor's select loop shares these descriptions
        os.set_blocking(reply_fd, True)
        try:
            result = run(job, call_fd, reply_fd)
        finally:
            os.close(call_fd)
            os.close(reply_fd)
        frames.write(RESULT_FD, {"id": job["id"], **result})
