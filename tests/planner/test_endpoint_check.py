"""Issue 19, item 6: an `openai:` policy's endpoint is checked when the planner starts — it answers and serves the
model — so a server that is down or a typo in the model name is one error at start-up, not every plan falling
back to the baseline in silence."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conductor.natsserver import free_port
from conductor.service import StartupError
from services.planner.app import create_service
from services.planner.backend import endpoint_check
from services.planner.config import PlannerSettings
from services.planner.policies.endpoint_check import check_endpoint


@pytest.fixture
def models_url() -> Iterator[str]:
    """An OpenAI-compatible server's base URL (…/v1) whose GET /v1/models lists the one model `served`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path == "/v1/models"
            listing = {
                "object": "list",
                "data": [{"id": "served", "object": "model", "created": 0, "owned_by": "t"}],
            }
            data = json.dumps(listing if found else {"detail": "Not Found"}).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def _check(model: str, base_url: str):
    return check_endpoint(
        name=f"openai:{model}", model=model, base_url=base_url, api_key="EMPTY", timeout_s=5
    )


async def test_a_served_model_passes(models_url):
    await _check("served", models_url)


async def test_a_model_the_endpoint_does_not_serve_is_named_with_what_it_serves(models_url):
    with pytest.raises(StartupError, match=r"does not serve the model 'sevred' \(it serves \['served'\]\)"):
        await _check("sevred", models_url)


async def test_a_base_url_without_v1_is_a_404_with_a_hint(models_url):
    with pytest.raises(StartupError, match=r"HTTP 404 \(does CONDUCTOR_POLICY_BASE_URL end in /v1\?\)"):
        await _check("served", models_url.removesuffix("/v1"))


async def test_an_endpoint_that_is_down_is_unreachable_at_once():
    with pytest.raises(
        StartupError, match=r"CONDUCTOR_POLICY=openai:served: the policy endpoint .* is unreachable"
    ):
        await _check("served", f"http://127.0.0.1:{free_port()}/v1")


def test_only_an_openai_policy_is_checked(models_url):
    assert endpoint_check(PlannerSettings(policy="baseline:moa")) is None
    assert endpoint_check(PlannerSettings(policy="openai:served", base_url=models_url), {}) is not None


async def test_the_planner_service_runs_the_check_when_it_starts(models_url):
    """Failed before: the planner started and served with a model its endpoint does not have."""
    svc = create_service({"CONDUCTOR_POLICY": "openai:typo", "CONDUCTOR_POLICY_BASE_URL": models_url})

    class NoBroker:
        connection = None

    with pytest.raises(StartupError, match="does not serve the model 'typo'"):
        await svc.start(NoBroker())  # type: ignore[arg-type]
    await svc.stop()
