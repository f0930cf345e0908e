"""The one way tests check that nats-server refuses a user something: try it, wait for the permissions violation."""

from __future__ import annotations

import asyncio
import re

from nats.aio.client import Client


async def assert_refused(nc: Client, errors: list[str], action: str, subject: str) -> None:
    """Subscribe or publish as ``nc`` (whose error callback appends to ``errors``), then close it; the server must
    have answered with a permissions violation naming ``subject``."""
    try:
        if action == "subscribe":
            await nc.subscribe(subject)
        else:
            await nc.publish(subject, b"{}")
        await nc.flush()
        for _ in range(100):
            if errors:
                break
            await asyncio.sleep(0.02)
    finally:
        await nc.close()
    verb = "subscription" if action == "subscribe" else "publish"
    refused = re.compile(rf'permissions violation for {verb} to "?{re.escape(subject)}', re.I)
    assert any(refused.search(e) for e in errors), errors
