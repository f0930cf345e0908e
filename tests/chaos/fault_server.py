"""A fast OpenAI-compatible chat server that injects provider faults, for the chaos and load suite.

Run as a process: ``python -m tests.chaos.fault_server PORT FAULT_RATE SEED [LATENCY_S]``. Each POST
/v1/chat/completions is answered after LATENCY_S (default 0: calls are in flight when a service is killed only
with a latency), and
fails with probability FAULT_RATE, split evenly between 429 (with ``retry-after-ms``), 500 and a timeout (the
response is held longer than any client waits). Successful answers are counted per conversation (a hash of the
messages): a conversation answered twice is a *re-executed* worker call. GET /stats returns the counts as JSON,
with the calls in flight right now, the wall-clock time the latest call arrived (abandoned-work checks) and, for
each re-executed call, every request of its conversation (arrival time, outcome, seconds to answer): the trace that
tells a retry after our own timeout from a redelivery or a lease taken over.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import sys
import time
from collections import Counter

HOLD_S = 30.0  # a "timeout" fault: far longer than the worker's timeout_s


class FaultServer:
    def __init__(self, fault_rate: float, seed: int, latency_s: float = 0.0) -> None:
        self.fault_rate = fault_rate
        self.latency_s = latency_s
        self.in_flight = 0
        self.last_request_at = 0.0
        self.rng = random.Random(seed)
        self.answered: Counter[str] = Counter()
        self.first_answered_at: dict[str, float] = {}  # wall clock, per conversation
        self.trail: dict[
            str, list[tuple[float, str, float]]
        ] = {}  # per conversation: (arrived, outcome, took_s)
        self.faults: Counter[str] = Counter()
        self.requests = 0
        self.topic: dict[str, str] = {}  # per conversation: the task it belongs to ("Task 17")

    def stats(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "faults": dict(self.faults),
            "answered": sum(self.answered.values()),
            "conversations": len(self.answered),
            "reexecuted": sum(n - 1 for n in self.answered.values() if n > 1),
            "in_flight": self.in_flight,
            # when each conversation answered twice was first answered: a re-execution is excused only if that
            # first answer was lost with a process killed around then
            "reexecuted_first_at": [self.first_answered_at[k] for k, n in self.answered.items() if n > 1],
            "last_request_at": self.last_request_at,
            "reexecuted_trails": [
                {"task": self.topic.get(k, ""), "requests": self.trail[k]}
                for k, n in self.answered.items()
                if n > 1
            ],
        }

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status, extra, payload = await self.route(method, path, body)
                data = json.dumps(payload).encode()
                hdrs = "".join(f"{k}: {v}\r\n" for k, v in extra.items())
                writer.write(
                    f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n{hdrs}\r\n".encode()
                    + data
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def route(self, method: str, path: str, body: bytes) -> tuple[str, dict[str, str], dict]:
        if method == "GET" and path == "/stats":
            return "200 OK", {}, self.stats()
        if method != "POST" or not path.endswith("/chat/completions"):
            return "404 Not Found", {}, {"error": {"message": "not found"}}
        self.requests += 1
        self.last_request_at = time.time()
        self.in_flight += 1
        try:
            return await self.complete(json.loads(body))
        finally:
            self.in_flight -= 1

    async def complete(self, req: dict) -> tuple[str, dict[str, str], dict]:
        key = hashlib.sha256(json.dumps(req["messages"], sort_keys=True).encode()).hexdigest()
        arrived = time.time()
        status, extra, payload = await self._outcome(key, req)
        if (
            key not in self.topic
            and (named := re.search(r"Task \d+", json.dumps(req["messages"]))) is not None
        ):
            self.topic[key] = named.group()
        self.trail.setdefault(key, []).append(
            (round(arrived, 3), status[:3], round(time.time() - arrived, 3))
        )
        return status, extra, payload

    async def _outcome(self, key: str, req: dict) -> tuple[str, dict[str, str], dict]:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        roll = self.rng.random()
        if roll < self.fault_rate / 3:
            self.faults["429"] += 1
            return "429 Too Many Requests", {"retry-after-ms": "100"}, {"error": {"message": "rate limited"}}
        if roll < 2 * self.fault_rate / 3:
            self.faults["500"] += 1
            return "500 Internal Server Error", {}, {"error": {"message": "server error"}}
        if roll < self.fault_rate:
            self.faults["timeout"] += 1
            await asyncio.sleep(HOLD_S)
            return "504 Gateway Timeout", {}, {"error": {"message": "held"}}
        self.answered[key] += 1
        self.first_answered_at.setdefault(key, time.time())
        text = f"Worked it out. Final answer: {key[:6]}"
        return (
            "200 OK",
            {},
            {
                "id": f"chatcmpl-{self.requests}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": req.get("model", "fault"),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48},
            },
        )


async def main(port: int, fault_rate: float, seed: int, latency_s: float = 0.0) -> None:
    server = FaultServer(fault_rate, seed, latency_s)
    srv = await asyncio.start_server(server.handle, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with srv:
        await srv.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), *map(float, sys.argv[4:5])))
