"""The jobs a supervisor runs, one per request op: stdin programs, calls, HumanEval checks, unittest suites.

Each job spawns one confined candidate through the zygote, pumps its pipes without ever blocking on it, enforces
its limits (CPU time of the sample's whole tree, a wall-clock backstop, output and result caps), then ends the
sample completely (``Run.finish``) and returns the raw result for the host to judge.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import time

import candidate
import frames
import reaper
import tester
from pump import Capped, FrameReader, Pump, Tail
from reaper import Fatal

CPU_POLL = 0.05  # seconds between readings of a sample's CPU time; also the pump's longest sleep


def exit_info(status: int) -> dict:
    code = os.waitstatus_to_exitcode(status)
    return {"code": code if code >= 0 else None, "signal": -code if code < 0 else None}


class Run:
    """One candidate process being pumped: its output sinks, its result frames, and its exit once the zygote reaps it."""

    def __init__(self, sandbox, pump: Pump, child: dict, limits: dict) -> None:
        self.sandbox, self.pump, self.child = sandbox, pump, child
        self.stdout = Capped(limits["output"])
        self.stderr = Tail(16 * 1024)
        result_cap = int(limits.get("result", frames.DEFAULT_MAX // 4))
        self.results = FrameReader(result_cap + 1024, max_total=2 * result_cap + 4096)
        self.exit_status: int | None = None
        self.cpu_seen: dict[int, float] = {}
        self.cpu_read_at = 0.0
        self.cpu_over = False
        self.resident_cap = int(limits.get("resident") or 0)
        self.memory_over = False
        self.zfd = sandbox.zsock.fileno()  # type: ignore[union-attr]
        pump.read(child["stdout"], self.stdout.feed)
        pump.read(child["stderr"], self.stderr.feed)
        pump.read(child["res"], self.results.feed)
        pump.read(self.zfd, self._notice)

    def over_budget(self, budget: float) -> bool:
        """Has this sample's whole process tree used more than ``budget`` CPU seconds, or does it hold more
        anonymous resident memory than its total (sandbox/budget.py)? Every process of the sandbox other than the
        judge's is the sample's; a process that died keeps the CPU time it was last seen with (its memory is
        freed), so children that escape into new sessions are still counted. Read at most every ``CPU_POLL``."""
        now = time.monotonic()
        if now - self.cpu_read_at >= CPU_POLL:
            self.cpu_read_at = now
            resident = 0
            for pid in self.sandbox._other_pids():
                self.cpu_seen[pid] = max(
                    self.cpu_seen.get(pid, 0.0), reaper.cpu_seconds([pid], own_only=True)
                )
                resident += reaper.anon_resident(pid)
            self.cpu_over = sum(self.cpu_seen.values()) > budget
            self.memory_over = bool(self.resident_cap) and resident > self.resident_cap
        return self.cpu_over or self.memory_over

    def _notice(self, message: bytes) -> None:
        if not message:
            raise Fatal("zygote exited")
        notice = json.loads(message)
        if "exit" in notice:
            self.exit_status = notice["exit"]

    @property
    def exited(self) -> bool:
        """The candidate itself is gone (children it left behind may still hold its pipes open)."""
        return self.exit_status is not None

    def overflow(self) -> bool:
        return self.stdout.overflow

    def finish(self) -> dict:
        """Kill what is left, reap the candidate through the zygote, drain what it wrote, close our pipe ends."""
        self.pump.forget(self.zfd)
        # The whole tree dies first, in one stroke: a fork bomb left running would starve the zygote we wait on.
        self.sandbox.kill_all()
        if self.exit_status is None:
            self.exit_status = self.sandbox.wait_exit()
        self.pump.run(
            lambda: not self.pump.readers, time.monotonic() + 1.0
        )  # every writer is dead: EOF comes fast
        self.pump.close()
        for name in ("stdin", "stdout", "stderr", "ctl", "res"):
            with contextlib.suppress(OSError):
                os.close(self.child[name])
        return exit_info(self.exit_status)

    def output(self) -> dict:
        return {
            "stdout": self.stdout.data.decode("utf-8", "replace"),
            "stderr": self.stderr.data[-4000:].decode("utf-8", "replace"),
        }


def _status(done: bool, run: Run, timed_out_status: str = "timeout") -> str:
    if run.overflow():
        return "output_limit"
    if run.memory_over:
        return "memory_limit"
    return "ok" if done and not run.cpu_over else timed_out_status


def job_stdio(sb, req: dict) -> dict:
    limits = req["limits"]
    work, _ = sb.fresh_dirs()
    pump = Pump()
    child = sb.spawn("exec", limits, work)
    run = Run(sb, pump, child, limits)
    pump.write(child["ctl"], frames.encode({"program": req["program"]}), close=True)
    pump.write(child["stdin"], req.get("stdin", "").encode("utf-8", "surrogateescape"), close=True)
    child["ctl"] = child["stdin"] = -1
    budget = limits["timeout"]
    start = time.monotonic()
    # The limit is the sample's own CPU time (its whole tree), so a verdict never depends on its neighbours; the
    # wall clock is only a backstop for a program that sleeps or blocks.
    done = pump.run(
        lambda: (
            (run.stdout.eof and run.stderr.eof) or run.exited or run.overflow() or run.over_budget(budget)
        ),
        start + limits.get("wall", limits["timeout"]),
        tick=CPU_POLL,
    )
    elapsed = time.monotonic() - start
    exit_ = run.finish()
    return {"status": _status(done, run), "exit": exit_, "elapsed": elapsed, **run.output()}


def job_call(sb, req: dict) -> dict:
    """Load once, then one call per test; stops at the first crash or timeout (later calls cannot be trusted)."""
    limits = req["limits"]
    work, _ = sb.fresh_dirs()
    pump = Pump()
    child = sb.spawn("serve", limits, work)
    run = Run(sb, pump, child, limits)
    os.close(child["stdin"])
    child["stdin"] = -1
    pump.write(child["ctl"], frames.encode({"program": req["program"]}))
    start = time.monotonic()
    total_deadline = start + limits.get("total", limits["timeout"] * (len(req["calls"]) + 1))
    cpu_budget = total_deadline - start
    status, replies = "ok", []

    def wait_frame(n: int) -> bool:
        deadline = min(time.monotonic() + limits["timeout"], total_deadline)
        return pump.run(
            lambda: (
                len(run.results.frames) >= n
                or run.results.eof
                or run.results.error is not None
                or run.exited
                or run.overflow()
                or run.over_budget(cpu_budget)
            ),
            deadline,
            tick=CPU_POLL,
        )

    if not wait_frame(1) or run.cpu_over or run.memory_over:
        status = "memory_limit" if run.memory_over else "timeout"
    elif run.results.frames and "loaded" in run.results.frames[0]:
        for i, args in enumerate(req["calls"]):
            pump.write(
                child["ctl"], frames.encode({"cls": req.get("cls"), "name": req["name"], "args": args})
            )
            if not wait_frame(i + 2) or run.cpu_over or run.memory_over:
                status = "memory_limit" if run.memory_over else "timeout"
                break
            if len(run.results.frames) < i + 2:
                break
    elapsed = time.monotonic() - start
    exit_ = run.finish()  # drains frames written just before the candidate exited
    if run.overflow():
        status = "output_limit"
    got = run.results.frames
    load = got[0] if got else {"load_error": ["Crashed", "no reply from the program"]}
    replies = got[1:]
    return {
        "status": status,
        "load": load,
        "replies": replies,
        "exit": exit_,
        "elapsed": elapsed,
        "protocol_error": run.results.error,
        **run.output(),
    }


def start_tester(sb) -> dict:
    """Fork the long-lived tester under its own uid; it only ever runs dataset code."""
    job_r, job_w = os.pipe()
    result_r, result_w = os.pipe()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    limits = dict(sb.config["tester_limits"])
    pid = os.fork()
    if pid == 0:
        try:
            devnull = os.open(os.devnull, os.O_RDWR)
            candidate.confine(
                {"cwd": sb.scratch, "limits": limits, "uid": sb.test_uid},
                [devnull, devnull, devnull, job_r, result_w, theirs.fileno()],
            )
        except BaseException:  # never run the tests unconfined
            os._exit(121)
        tester.serve()
    os.close(job_r)
    os.close(result_w)
    theirs.close()
    return {"pid": pid, "job": job_w, "result": result_r, "sock": ours, "reader": FrameReader(1 << 20)}


def job_humaneval(sb, req: dict) -> dict:
    limits = req["limits"]
    work, _ = sb.fresh_dirs()
    proc = sb.tester()
    sb.job_id += 1
    pump = Pump()
    child = sb.spawn("serve", limits, work)
    run = Run(sb, pump, child, limits)
    pump.forget(child["res"])  # the tester, not the supervisor, talks to the candidate
    os.close(child["stdin"])
    child["stdin"] = -1
    start = time.monotonic()
    deadline = start + limits["timeout"]
    budget = limits["timeout"]
    pump.write(child["ctl"], frames.encode({"program": req["program"]}))
    flushed = pump.run(lambda: child["ctl"] not in pump.pending, deadline)
    verdict = proc["reader"]
    verdict.frames.clear()
    done = False
    if flushed:
        socket.send_fds(proc["sock"], [b"job"], [child["ctl"], child["res"]])
        job = {
            "id": sb.job_id,
            "prompt": req["prompt"],
            "test": req["test"],
            "entry_point": req["entry_point"],
        }
        pump.write(proc["job"], frames.encode(job))
        pump.read(proc["result"], verdict.feed)
        mine = lambda: any(f.get("id") == sb.job_id for f in verdict.frames)  # noqa: E731
        done = pump.run(
            lambda: (
                mine()
                or verdict.eof
                or verdict.error is not None
                or run.overflow()
                or run.over_budget(budget)
            ),
            deadline,
            tick=CPU_POLL,
        )
        pump.forget(proc["result"])
    elapsed = time.monotonic() - start
    result = next((f for f in verdict.frames if f.get("id") == sb.job_id), None)
    if result is None or not done:
        sb.stop_tester()  # stuck or gone: a fresh one is forked for the next job
    exit_ = run.finish()
    result = result or {"passed": False, "error": "tester produced no verdict"}
    result.pop("id", None)
    return {"status": _status(done, run), "exit": exit_, "elapsed": elapsed, **result, **run.output()}


def job_unittest(sb, req: dict) -> dict:
    limits = req["limits"]
    work, _ = sb.fresh_dirs()
    pump = Pump()
    child = sb.spawn("unittest", limits, work)
    run = Run(sb, pump, child, limits)
    nonce = secrets.token_hex(16)
    first = {
        "program": req["program"],
        "test": req["test"],
        "preload": req.get("preload", []),
        "nonce": nonce,
        "entry_point": req.get("entry_point", "task_func"),
    }
    pump.write(child["ctl"], frames.encode(first), close=True)
    os.close(child["stdin"])
    child["ctl"] = child["stdin"] = -1
    start = time.monotonic()
    done = pump.run(
        lambda: (
            run.results.eof
            or run.results.error is not None
            or run.exited
            or run.overflow()
            or run.over_budget(limits["timeout"])
        ),
        start + limits["timeout"],
        tick=CPU_POLL,
    )
    elapsed = time.monotonic() - start
    exit_ = run.finish()
    reports = run.results.frames
    forged = len(reports) > 1 or (len(reports) == 1 and reports[0].get("nonce") != nonce)
    report = reports[0] if len(reports) == 1 and not forged else {}
    return {
        "status": _status(done, run),
        "exit": exit_,
        "elapsed": elapsed,
        "results": report.get("results"),
        "tampered": report.get("tampered")
        or ("a report not written by the harness arrived" if forged else None),
        "protocol_error": run.results.error,
        **run.output(),
    }


JOBS = {"stdio": job_stdio, "call": job_call, "humaneval": job_humaneval, "unittest": job_unittest}
