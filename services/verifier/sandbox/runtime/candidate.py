"""The candidate side of the sandbox: confine a freshly forked child, then run the model's program in it.

Fixed descriptors: 0 stdin, 1 stdout, 2 stderr (drained and capped by the supervisor, never a verdict channel),
3 control frames in (the program, then calls), 4 result frames out. The process never receives expected outputs:
stdin tests get only their input, call tests only their arguments, so whatever it writes back is its own answer
and the comparison happens outside, on the host.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import gc
import os
import resource
import signal
import sys
import threading
import traceback
import types

import frames
import values

CTL_FD = 3
RES_FD = 4
MAX_CTL_FRAME = 256 * 1024 * 1024


def confine(spec: dict, fds: list[int]) -> None:
    """Own session, fixed descriptors, private cwd, rlimits, non-root uid — in that order (uid last: it drops caps)."""
    os.setsid()
    high = [_dup_high(fd) for fd in fds]  # move sources above the 0..n range before overwriting any of it
    for target, fd in enumerate(high):
        os.dup2(fd, target)
        os.set_blocking(
            target, True
        )  # the supervisor's select loop may have left the shared description non-blocking
    os.closerange(len(fds), 65536)
    os.chdir(spec["cwd"])
    limits = spec["limits"]
    cpu = int(limits["cpu"])
    for name, soft, hard in (
        ("RLIMIT_AS", limits["memory"], limits["memory"]),
        ("RLIMIT_CPU", cpu, cpu + 1),
        ("RLIMIT_FSIZE", limits["fsize"], limits["fsize"]),
        ("RLIMIT_NPROC", limits["nproc"], limits["nproc"]),
        ("RLIMIT_NOFILE", limits["nofile"], limits["nofile"]),
        ("RLIMIT_CORE", 0, 0),
    ):
        resource.setrlimit(getattr(resource, name), (soft, hard))
    uid = spec.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False, buffering=1)


def _dup_high(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD, 100)


def fresh_main() -> dict:
    """A clean ``__main__`` module so ``if __name__ == "__main__"`` and pickling by module name behave normally."""
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    return module.__dict__


def flush_and_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:  # stdout may be closed or broken by the program; the exit code still counts
            pass
    os._exit(code)


def run_exec(program: str) -> None:
    """stdin/stdout mode: run the program as ``__main__``, then shut down as ``python prog.py < input`` would."""
    atexit._clear()  # handlers registered by the zygote's imports are not the program's
    main = fresh_main()
    try:
        exec(compile(program, "<candidate>", "exec"), main)
    except SystemExit as exc:
        code = exit_code(exc)
    except BaseException:  # the reference prints the traceback and exits 1, after the same shutdown
        traceback.print_exc()
        code = 1
    else:
        code = 0
    shut_down(main, code)


def exit_code(exc: SystemExit) -> int:
    """The status the interpreter gives ``sys.exit(arg)``: None is 0, an int is itself, anything else is printed to
    stderr and is 1."""
    if exc.code is None:
        return 0
    if type(exc.code) is int:
        return exc.code & 0xFF
    try:
        print(exc.code, file=sys.stderr)
    except Exception:  # an unprintable exit message still exits 1
        pass
    return 1


def shut_down(main: dict, code: int) -> None:
    """The interpreter's own shutdown, in its order, without its cost: join non-daemon threads, run ``atexit``
    handlers, clear ``__main__`` (``__del__`` at exit) and collect, flush every stream, then exit.

    A full interpreter finalisation would tear down every module the zygote preloaded and touch its whole heap
    (copy-on-write faults in every forked candidate), about three times the cost of a small test; what a program
    can observe of it is exactly these steps, so they are done explicitly.
    """
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()  # prints and skips a failing handler, as at a real exit
    with contextlib.suppress(BaseException):
        for name in [n for n in main if n.startswith("_") and n != "__builtins__"]:
            main[name] = None  # the interpreter clears underscore names first, then the rest
        for name in [n for n in main if n != "__builtins__"]:
            main[name] = None
        gc.collect()  # cycles holding open files or ``__del__`` objects; frozen zygote objects are not examined
    flush_and_exit(code)


def _describe(exc: BaseException) -> list[str]:
    return [type(exc).__name__, str(exc)[:500]]


def run_serve(program: str, max_reply: int) -> None:
    """Call mode: load the program, then answer call frames until the control pipe closes.

    A reply larger than ``max_reply`` bytes is replaced by a note saying so: the return value is the candidate's
    answer, so an oversized one is a wrong answer (judged on the host), not a broken channel.
    """
    ns = fresh_main()
    try:
        exec(compile(program, "<candidate>", "exec"), ns)
    except BaseException as exc:  # a program that cannot load is reported, then the process ends
        frames.write(RES_FD, {"load_error": _describe(exc)})
        flush_and_exit(1)
    frames.write(RES_FD, {"loaded": True})
    while True:
        try:
            call = frames.read(CTL_FD, MAX_CTL_FRAME)
        except frames.FrameError:
            flush_and_exit(0)
        reply = frames.encode(answer(ns, call))
        if len(reply) > max_reply + frames.HEADER.size:
            reply = frames.encode(
                {"unencodable": f"a reply of {len(reply)} bytes exceeds the {max_reply}-byte limit"}
            )
        frames.write_bytes(RES_FD, reply)


def answer(ns: dict, call: dict) -> dict:
    """Run one call; the reply carries the encoded return value, the exception raised, or why it cannot be sent."""
    try:
        target = ns[call["cls"]]() if call.get("cls") else ns
        func = getattr(target, call["name"]) if call.get("cls") else target[call["name"]]
        args = values.from_tree(call["args"])
        kwargs = values.from_tree(call.get("kwargs", {"d": []}))
        result = func(*args, **kwargs)
    except SystemExit as exc:
        return {"raised": ["SystemExit", str(exc.code)]}
    except BaseException as exc:  # the exception is the candidate's answer to this call
        return {"raised": _describe(exc)}
    try:
        return {"ok": values.to_tree(result)}
    except values.UnencodableValue as exc:
        return {"unencodable": str(exc)}
    except BaseException as exc:  # e.g. a container whose iteration raises
        return {"unencodable": f"{type(exc).__name__}: {exc}"[:500]}


def main(spec: dict, fds: list[int]) -> None:
    """Entry point in the forked child; never returns."""
    try:
        confine(spec, fds)
        first = frames.read(CTL_FD, MAX_CTL_FRAME)
    except BaseException:  # confinement failed: die rather than run unconfined
        os._exit(121)
    mode = spec["mode"]
    if mode == "exec":
        run_exec(first["program"])
    elif mode == "serve":
        run_serve(first["program"], int(spec["limits"].get("result", frames.DEFAULT_MAX // 4)))
    elif mode == "unittest":
        import unittest_harness

        unittest_harness.run(
            first["program"],
            first["test"],
            first.get("preload", []),
            first["nonce"],
            first.get("entry_point", "task_func"),
        )
    os._exit(122)
