"""Test-side HTTP for the probe server: a raw GET (no client library needed) and Prometheus text parsed to values."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

Series = tuple[str, frozenset[tuple[str, str]]]


async def http_get(port: int, path: str, *, method: str = "GET", timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of one request to 127.0.0.1:port."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def parse(text: str) -> dict[Series, float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict[Series, float], name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def delta(before: dict[Series, float], after: dict[Series, float], name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


async def scrape(port: int) -> dict[Series, float]:
    status, body = await http_get(port, "/metrics")
    assert status == 200, body[:200]
    return parse(body.decode())


async def wait_status(port: int, path: str, status: int, *, timeout: float = 20.0) -> None:
    """Poll until ``path`` answers ``status``."""
    deadline = asyncio.get_running_loop().time() + timeout
    last = None
    while asyncio.get_running_loop().time() < deadline:
        last = (await http_get(port, path))[0]
        if last == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} answered {last}, not {status}, within {timeout}s")
