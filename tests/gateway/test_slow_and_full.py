"""The door under a slow client and a full JetStream store (issue 19, item 7): a connection that never finishes its
headers is closed within the header timeout; a full store is named as the cause, in OpenAI's error shape, for a
limited key's quota record and for a durable submission alike."""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import nats.js.errors
import pytest

from conductor.natsserver import find_binary, free_port, reachable
from tests.gateway.conftest import QUESTION, start_gateway
from tests.gateway.test_gateway import _auth, _post

pytestmark = pytest.mark.nats


async def _closed_after(port: int, chunks: list[bytes], gap_s: float, limit_s: float) -> float:
    """Seconds until the server closes a connection that sends ``chunks`` (``gap_s`` apart) and never ends its
    headers; fails after ``limit_s``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()

    async def drip() -> None:
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
            await asyncio.sleep(gap_s)

    dripping = asyncio.create_task(drip())
    try:
        data = await asyncio.wait_for(reader.read(), limit_s)  # b"" (or an error response) once closed
        assert b"HTTP/1.1 200" not in data
        return time.monotonic() - started
    finally:
        dripping.cancel()
        writer.close()


async def test_a_connection_that_never_finishes_its_headers_is_closed(nats_url, subject_prefix, tmp_path):
    """Failed before: aiohttp's keep-alive timeout (its only bound on reading headers) was its default of an hour,
    so a slow-loris connection was held 60-90 s and more. Partial header bytes do not extend the bound."""
    ctx, gw = await start_gateway(nats_url, subject_prefix, tmp_path, services=(), header_timeout_s=0.5)
    async with ctx:
        port = gw.service.port
        assert port is not None
        silent = await _closed_after(port, [b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"], 0.1, 5.0)
        drip = [
            bytes([b])
            for b in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaa"
        ]
        dripped = await _closed_after(port, drip, 0.05, 5.0)
        assert silent < 2.0 and dripped < 2.0, (silent, dripped)
        # an idle connection that sent nothing at all is closed too
        assert await _closed_after(port, [], 0.0, 5.0) < 2.0


@pytest.fixture
def small_store() -> Iterator[str]:
    """A nats-server of its own whose JetStream file store holds 1 MB, so a test can fill it."""
    run = Path(tempfile.mkdtemp(prefix="conductor-full-"))
    port = free_port()
    conf = run / "nats.conf"
    conf.write_text(
        f'port: {port}\nhost: "127.0.0.1"\njetstream {{ store_dir: "{run}", max_file_store: 1MB, '
        "max_memory_store: 1MB }\n"
    )
    proc = subprocess.Popen(
        [find_binary(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"nats://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while not reachable(url, timeout=0.2):
            assert proc.poll() is None and time.monotonic() < deadline, "nats-server did not start"
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _fill(url: str) -> None:
    """Write to a stream of its own until JetStream refuses for lack of room."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="FILLER", subjects=["filler.>"])
        with pytest.raises(nats.js.errors.APIError) as refused:
            for _ in range(100):
                await js.publish("filler.x", b"x" * 60_000)
        assert refused.value.err_code == 10023, refused.value  # "insufficient resources"
    finally:
        await nc.close()


async def test_a_full_store_is_named_as_the_cause(small_store, subject_prefix, tmp_path):
    """Failed before: the limited key's quota write was retried 50 times as if another replica had won, then
    answered "quota record is too contended"; the durable submission was a 500 "the gateway failed"."""
    ctx, gw = await start_gateway(small_store, subject_prefix, tmp_path, services=("executor",))
    async with ctx:
        gw.url = f"http://127.0.0.1:{gw.service.port}"
        await _fill(small_store)
        chat = {"model": "sim-small", "messages": [{"role": "user", "content": QUESTION}]}
        status, payload, _ = await _post(gw, json.dumps(chat), _auth(gw.limited_key))
        assert status == 503 and payload["error"]["code"] == "storage_full", payload
        assert "full" in payload["error"]["message"] and "contended" not in payload["error"]["message"]
        assert payload["error"]["type"] == "service_unavailable"

        status, payload, _ = await _post(gw, json.dumps({**chat, "durable": True}))
        assert status == 503 and payload["error"]["code"] == "storage_full", payload
        assert "durable task queue" in payload["error"]["message"]
