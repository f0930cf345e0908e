"""The ``vllm`` tier's one fixture (``vllm_server``, tests/conftest.py) finds the server and the model it serves the
same way for the planner, worker-adapter and end-to-end tests (before: three copies of ``_served_model``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.vllm_server import VllmServer, served


class _Models(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # GET /v1/models, as vLLM answers it: the served model first
        body = {
            "object": "list",
            "data": [{"id": "smollm2", "object": "model", "created": 0, "owned_by": "vllm"}],
        }
        data = json.dumps(body).encode() if self.path == "/v1/models" else b"{}"
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def models_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_no_url_means_no_server() -> None:
    assert served({}) is None and served({"CONDUCTOR_VLLM_MODEL": "smollm2"}) is None


def test_the_model_is_the_one_named_else_the_first_the_server_lists(models_url: str) -> None:
    assert served({"CONDUCTOR_VLLM_URL": models_url}) == VllmServer(url=models_url, model="smollm2")
    named = served({"CONDUCTOR_VLLM_URL": models_url, "CONDUCTOR_VLLM_MODEL": "other"})
    assert named == VllmServer(url=models_url, model="other")
