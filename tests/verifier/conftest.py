"""One warm Verifier for the whole verifier suite (its processes start once), with short limits so hostile tests are quick.

Async tests that use it declare ``pytestmark = pytest.mark.asyncio(loop_scope="session")``: the processes belong to the
session's event loop.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from services.verifier.config import Settings
from services.verifier.core import Verifier

FIXTURES = Path(__file__).parent / "fixtures"
TEST_ENV = {
    "CONDUCTOR_VERIFIER_WORKERS": "2",
    "CONDUCTOR_SANDBOX_WORKERS": "4",
    "CONDUCTOR_VERIFIER_STDIO_TIMEOUT_S": "2",
    "CONDUCTOR_VERIFIER_CALL_TIMEOUT_S": "2",
    "CONDUCTOR_VERIFIER_HUMANEVAL_TIMEOUT_S": "4",
    "CONDUCTOR_VERIFIER_UNITTEST_TIMEOUT_S": "20",
    "CONDUCTOR_SANDBOX_MEMORY_MB": "1024",
    "CONDUCTOR_SANDBOX_OUTPUT_MB": "4",
    "CONDUCTOR_SANDBOX_TMP_MB": "64",
    # Own candidate uids per test session: other checkouts on this host run the same suite at the same time, and
    # the host-side "no candidate process left" checks look processes up by uid.
    "CONDUCTOR_SANDBOX_UID_BASE": str(62000 + (os.getpid() % 1000) * 16),
}


def make_settings(**overrides: str) -> Settings:
    return Settings.from_env({**TEST_ENV, **overrides})


def sandbox_capable() -> bool:
    """The full isolation suite needs root (separate uids) and a working bubblewrap."""
    from services.verifier.sandbox import launcher

    settings = make_settings()
    return os.geteuid() == 0 and launcher.choose_backend(settings) == "bwrap"


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def verifier() -> AsyncIterator[Verifier]:
    async with Verifier(make_settings()) as v:
        yield v
