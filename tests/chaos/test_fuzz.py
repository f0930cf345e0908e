"""Fuzz the public entry points of `conductor serve all` (a real process on a real nats-server) with malformed input.

Every payload sent to ``conductor.solve`` must get a typed ``bad_request``/``payload_too_large`` reply (a payload
over NATS' own max_payload is refused before it reaches a service: counted as ``server_rejected``), the process
must survive and still solve, its RSS must stay flat after a warm-up, and its ``conductor_bad_requests_total``
must count every rejection. Malformed tasks published to the durable queue must each end in a typed error result,
none left unacknowledged. The smoke version (same code, fewer payloads) runs by default; the full one (10,000) is
`make test-chaos`.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import nats
import nats.errors
import nats.js.errors
import pytest

from bench.processes import Service
from conductor.access import CLIENT
from conductor.natsserver import free_port
from conductor.settings import CommonSettings
from schemas.errors import ErrorCode
from schemas.solve import SolveRequest, SolveResult, solve_subject
from schemas.tasks import Names, task_key
from services.executor.validation import valid_task_id
from tests.chaos.payloads import Payload, payloads
from tests.conductor.scrape import scrape, value

MAX_PAYLOAD = 262_144  # the services' limit; NATS' own is 1 MiB, so both "too large" paths are exercised
TYPED = {ErrorCode.BAD_REQUEST, ErrorCode.PAYLOAD_TOO_LARGE}
QUESTION = "What is the remainder when 2^100 is divided by 7?"
_result = msgspec.json.Decoder(SolveResult)


@dataclass
class FuzzReport:
    sent: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    server_rejected: int = 0
    untyped: list[tuple[str, bytes, str]] = field(
        default_factory=list
    )  # (kind, payload head, what came back)
    wrong_field: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)  # after warm-up, then at the end
    wall_s: float = 0.0

    @property
    def replies(self) -> int:
        return sum(self.codes.values())


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


async def _send(nc: nats.NATS, subject: str, p: Payload, report: FuzzReport) -> None:
    report.sent += 1
    try:
        reply = await nc.request(subject, p.data, timeout=30)
    except nats.errors.MaxPayloadError:
        report.server_rejected += 1  # over the server's max_payload: the client library refuses to send it
        return
    except nats.errors.TimeoutError:
        report.untyped.append((p.kind, p.data[:80], "no reply"))
        return
    try:
        res = _result.decode(reply.data)
    except msgspec.DecodeError as exc:
        report.untyped.append((p.kind, p.data[:80], f"undecodable reply: {exc}"))
        return
    if res.error is None or res.error.code not in TYPED or res.answer is not None or res.workflows:
        report.untyped.append((p.kind, p.data[:80], repr(res)[:300]))
        return
    report.codes[str(res.error.code)] += 1
    if p.expect is not None and res.error.field != p.expect:
        report.wrong_field.append((p.kind, p.expect, res.error.field))


async def fuzz_solve(
    nc: nats.NATS, subject: str, batch: list[Payload], report: FuzzReport, concurrency: int
) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(p: Payload) -> None:
        async with gate:
            await _send(nc, subject, p, report)

    await asyncio.gather(*(one(p) for p in batch))


def expected_key(p: Payload, msg_id: str) -> str:
    """Where the executor stores a rejected task's result: the request's own task id when it is a usable one."""
    try:
        req = msgspec.json.decode(p.data, type=SolveRequest)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return msg_id
    return req.task_id if req.task_id is not None and valid_task_id(req.task_id) else msg_id


async def fuzz_intake(
    nc: nats.NATS, prefix: str, batch: list[Payload], timeout: float = 60.0
) -> dict[str, str]:
    """Publish malformed tasks to the durable queue; return each expected result key's error code (or what
    came back instead)."""
    names = Names.for_prefix(prefix)
    js = nc.jetstream()
    keys = set()
    for i, p in enumerate(batch):
        msg_id = f"fuzz-{i}"
        await js.publish(
            names.submit(CLIENT), p.data, stream=names.tasks_stream, headers={"Nats-Msg-Id": msg_id}
        )
        keys.add(task_key(CLIENT, expected_key(p, msg_id)))
    kv = await js.key_value(names.results_bucket)
    found: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while len(found) < len(keys) and time.monotonic() < deadline:
        for key in keys - set(found):
            try:
                entry = await kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                continue
            res = _result.decode(entry.value or b"")
            found[key] = (
                str(res.error.code) if res.error is not None and res.error.code in TYPED else repr(res)
            )
        await asyncio.sleep(0.1)
    info = await js.consumer_info(names.tasks_stream, "executor")
    assert info.num_ack_pending == 0 and info.num_pending == 0, info  # nothing stuck in redelivery
    return {k: found.get(k, "missing") for k in keys}


async def run_fuzz(tmp: Path, nats_url: str, prefix: str, *, n: int, intake_n: int, seed: int) -> FuzzReport:
    metrics_port = free_port()
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": prefix,
        "CONDUCTOR_MAX_PAYLOAD_BYTES": str(MAX_PAYLOAD),
        "CONDUCTOR_METRICS_PORT": str(metrics_port),
        "CONDUCTOR_LOG_LEVEL": "WARNING",
    }
    settings = CommonSettings.from_env(env)
    service = Service("all", env, tmp / "serve.log")
    service.start()
    assert service.proc is not None
    pid = service.proc.pid
    report = FuzzReport()
    batch = payloads(n, seed=seed, limit=MAX_PAYLOAD)
    warm = max(100, n // 10)
    nc = await nats.connect(nats_url, max_reconnect_attempts=0)
    try:
        before = await scrape(metrics_port)
        started = time.monotonic()
        await fuzz_solve(nc, settings.subject(solve_subject(CLIENT)), batch[:warm], report, concurrency=64)
        report.rss_kib.append(rss_kib(pid))
        await fuzz_solve(nc, settings.subject(solve_subject(CLIENT)), batch[warm:], report, concurrency=64)
        report.wall_s = time.monotonic() - started
        after = await scrape(metrics_port)
        counted = value(after, "conductor_bad_requests_total", subject="conductor.solve") - value(
            before, "conductor_bad_requests_total", subject="conductor.solve"
        )
        assert counted == report.replies, (counted, report.replies)
        intake = [p for p in payloads(intake_n, seed=seed + 1, limit=MAX_PAYLOAD) if len(p.data) < 1_000_000]
        outcomes = await fuzz_intake(nc, prefix, intake)
        bad = {k: v for k, v in outcomes.items() if v not in {str(c) for c in TYPED}}
        assert not bad, bad
        reply = await nc.request(
            settings.subject(solve_subject(CLIENT)),
            msgspec.json.encode(SolveRequest(question=QUESTION)),
            timeout=60,
        )
        assert _result.decode(reply.data).answer, "serve all no longer solves after the fuzz"
        report.rss_kib.append(rss_kib(pid))
        assert service.proc.poll() is None, "serve all died"
    finally:
        await nc.close()
        service.stop()
    return report


def check(report: FuzzReport, n: int) -> None:
    print(
        f"\nfuzz: {report.sent} payloads in {report.wall_s:.1f}s; replies {dict(report.codes)}; "
        f"refused by the server (over its max_payload) {report.server_rejected}; "
        f"RSS after warm-up {report.rss_kib[0]} KiB, at the end {report.rss_kib[1]} KiB"
    )
    assert report.sent == n
    assert not report.untyped, report.untyped[:10]
    assert not report.wrong_field, report.wrong_field[:10]
    assert report.replies + report.server_rejected == n
    assert report.rss_kib[1] < report.rss_kib[0] * 1.3, report.rss_kib


async def test_fuzz_smoke(tmp_path, nats_url, subject_prefix):
    report = await run_fuzz(tmp_path, nats_url, subject_prefix, n=500, intake_n=60, seed=7)
    check(report, 500)


@pytest.mark.chaos
async def test_fuzz_full(tmp_path, nats_url, subject_prefix):
    report = await run_fuzz(tmp_path, nats_url, subject_prefix, n=10_000, intake_n=500, seed=11)
    check(report, 10_000)
