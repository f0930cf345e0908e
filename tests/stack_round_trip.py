"""The one round trip the secured-stack tests make as per-service users: a solve, a durable task and its stored
result through ``ConductorClient``, and a chat completion through the gateway over plain HTTP."""

from __future__ import annotations

import asyncio
import json
import urllib.request

from conductor.client import ConductorClient
from conductor.settings import CommonSettings
from schemas.solve import SolveRequest

QUESTION = "What is the remainder when 2^100 is divided by 7?"  # in the bundled sim dataset (answer 2)


def chat(gateway_port: int, question: str) -> dict:
    """One OpenAI-shaped chat completion through the gateway, over plain HTTP."""
    body = json.dumps({"model": "conductor", "messages": [{"role": "user", "content": question}]}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{gateway_port}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


async def solve_submit_and_chat(settings: CommonSettings, gateway_port: int) -> None:
    async with ConductorClient(settings) as client:
        result = await client.solve(SolveRequest(question=QUESTION, domain="math", reference="2"), timeout=60)
        assert result.error is None and result.answer and result.verdict is not None
        task_id = await client.submit(SolveRequest(question=QUESTION, domain="math", reference="2"))
        stored = await client.result(task_id, wait=60)
        assert stored.task_id == task_id and stored.error is None and stored.verdict is not None
    reply = await asyncio.to_thread(chat, gateway_port, QUESTION)
    assert reply["choices"][0]["message"]["content"], reply
