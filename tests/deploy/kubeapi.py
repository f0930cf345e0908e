"""A local HTTP server speaking the Kubernetes API for the calls conductor/kube.py makes: list Deployments,
StatefulSets and Pods by label selector, read a Deployment, strategic-merge-patch a Deployment. Bearer-token
auth, Kubernetes Status errors, and a rollout the test completes by hand."""

from __future__ import annotations

import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

ROUTE = re.compile(
    r"^/(?:api/v1|apis/apps/v1)/namespaces/([^/]+)/(deployments|statefulsets|pods)(?:/([^/]+))?$"
)
LIST_KIND = {"deployments": "DeploymentList", "statefulsets": "StatefulSetList", "pods": "PodList"}
STRATEGIC = "application/strategic-merge-patch+json"


def strategic_merge(base: Any, patch: Any) -> Any:
    """The subset of strategic merge the roll uses: maps merge, lists of named items merge by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = strategic_merge(base.get(key), value)
        return out
    if (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(i, dict) and "name" in i for i in patch)
    ):
        out = [dict(i) for i in base]
        for item in patch:
            match = next((i for i, b in enumerate(out) if b.get("name") == item["name"]), None)
            if match is None:
                out.append(item)
            else:
                out[match] = strategic_merge(out[match], item)
        return out
    return copy.deepcopy(patch)


class KubeApi:
    def __init__(self, token: str = "test-token") -> None:
        self.token = token
        self.objects: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, content type)
        self.forbidden: set[str] = set()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, namespace: str, resource: str, obj: dict[str, Any]) -> None:
        self.objects.setdefault((namespace, resource), {})[obj["metadata"]["name"]] = obj

    def get(self, namespace: str, resource: str, name: str) -> dict[str, Any]:
        return self.objects[(namespace, resource)][name]

    def complete_rollout(self, namespace: str, name: str) -> None:
        """What the controller would do: every replica runs the newest generation."""
        dep = self.get(namespace, "deployments", name)
        want = dep["spec"].get("replicas", 1)
        dep["status"] = {
            "observedGeneration": dep["metadata"]["generation"],
            "replicas": want,
            "updatedReplicas": want,
            "availableReplicas": want,
            "readyReplicas": want,
        }

    def __enter__(self) -> KubeApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, reason: str, message: str) -> None:
                self._send(
                    code,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Failure",
                        "message": message,
                        "reason": reason,
                        "code": code,
                    },
                )

            def _route(self) -> tuple[str, str, str | None, dict[str, list[str]]] | None:
                url = urlparse(self.path)
                api.requests.append((self.command, url.path, self.headers.get("Content-Type")))
                if self.headers.get("Authorization") != f"Bearer {api.token}":
                    self._status(401, "Unauthorized", "bad token")
                    return None
                match = ROUTE.match(url.path)
                if not match:
                    self._status(404, "NotFound", f"no route {url.path}")
                    return None
                ns, resource, name = match.groups()
                return ns, resource, name, parse_qs(url.query)

            def do_GET(self) -> None:
                route = self._route()
                if route is None:
                    return
                ns, resource, name, query = route
                items = api.objects.get((ns, resource), {})
                if name is not None:
                    if name not in items:
                        return self._status(404, "NotFound", f'{resource} "{name}" not found')
                    return self._send(200, items[name])
                wanted = dict(p.split("=", 1) for p in query.get("labelSelector", [""])[0].split(",") if p)
                found = [
                    o for o in items.values() if wanted.items() <= o["metadata"].get("labels", {}).items()
                ]
                api_version = "v1" if resource == "pods" else "apps/v1"
                self._send(
                    200,
                    {
                        "kind": LIST_KIND[resource],
                        "apiVersion": api_version,
                        "metadata": {"resourceVersion": "1"},
                        "items": found,
                    },
                )

            def do_PATCH(self) -> None:
                route = self._route()
                if route is None:
                    return
                ns, resource, name, _ = route
                if name in api.forbidden:
                    return self._status(403, "Forbidden", f'cannot patch {resource} "{name}"')
                if self.headers.get("Content-Type") != STRATEGIC:
                    return self._status(415, "UnsupportedMediaType", self.headers.get("Content-Type", ""))
                items = api.objects.get((ns, resource), {})
                if name not in items:
                    return self._status(404, "NotFound", f'{resource} "{name}" not found')
                patch = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                merged = strategic_merge(items[name], patch)
                if merged["spec"] != items[name]["spec"]:
                    merged["metadata"]["generation"] = items[name]["metadata"].get("generation", 1) + 1
                items[name] = merged
                self._send(200, merged)

        return Handler
