"""A fake Kubernetes API server on loopback for the DRA driver's tests: the few resource.k8s.io/v1
and core/v1 endpoints the driver calls, spoken to by the real `kubernetes` client.

Paths, verbs, the ``fieldSelector`` on ResourceSlices, ``resourceVersion`` conflicts (409) and the
Status body of errors follow the Kubernetes API reference for resource.k8s.io/v1 (the shapes in
kubernetes/api resource/v1/types.go); `down` and `delay` emulate an unreachable or slow server.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RESOURCE = "/apis/resource.k8s.io/v1"


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out went away mid-answer (the slow-server tests): not an error here.
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeApiServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.slices: dict[str, dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.down = False
        self.delay = 0.0
        self._version = 0
        self._server = _QuietServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fakeapi", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def kubeconfig(self, path: Path) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "driver", "user": {"token": "test-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "driver"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))
        return path

    # --- objects --------------------------------------------------------------------------------

    def next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def add_node(self, name: str, uid: str = "node-uid-1") -> None:
        with self.lock:
            self.nodes[name] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": uid}}

    def add_claim(
        self,
        namespace: str,
        name: str,
        uid: str,
        results: list[dict[str, Any]] | None,
    ) -> None:
        """A claim; ``results`` are its allocation results (None: not allocated)."""
        claim: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {
                "devices": {"requests": [{"name": "npu", "exactly": {"deviceClassName": "npu.rockchip.com"}}]}
            },
            "status": {},
        }
        if results is not None:
            claim["status"] = {"allocation": {"devices": {"results": results}}}
        with self.lock:
            self.claims[(namespace, name)] = claim

    def wait_slices(self, predicate: Any, timeout: float = 60.0) -> dict[str, dict[str, Any]]:
        """Wait until ``predicate(slices)`` holds (a condition, not a sleep); the slices then."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate(self.slices):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"slices never matched: {self.slices}")
                self.changed.wait(left)
            return copy.deepcopy(self.slices)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _handler(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Go's net/http (the real API server) sets TCP_NODELAY; without it headers and body go
        # out as two segments and the client's delayed ACK adds 40 ms to every request.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            parsed: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
            return parsed

        def _serve(self, method: str) -> None:
            url = urllib.parse.urlsplit(self.path)
            body = self._body() if method in ("POST", "PUT") else {}
            with api.lock:
                api.requests.append((method, url.path))
                delay, down = api.delay, api.down
            if delay:
                time.sleep(delay)  # the emulated slow server (the client's timeout is under test)
            if down:
                self._send(503, _status(503, "ServiceUnavailable", "the fake API server is down"))
                return
            with api.changed:
                code, answer = self._route(method, url.path, urllib.parse.parse_qs(url.query), body)
                api.changed.notify_all()
            self._send(code, answer)

        def _route(
            self, method: str, path: str, query: dict[str, list[str]], body: dict[str, Any]
        ) -> tuple[int, dict[str, Any]]:
            parts = path.strip("/").split("/")
            if path.startswith("/api/v1/nodes/") and method == "GET":
                node = api.nodes.get(parts[-1])
                return (
                    (200, node) if node else (404, _status(404, "NotFound", f'nodes "{parts[-1]}" not found'))
                )
            if path.startswith(f"{RESOURCE}/namespaces/") and "resourceclaims" in parts and method == "GET":
                namespace, name = parts[4], parts[6]
                claim = api.claims.get((namespace, name))
                if claim is None:
                    return 404, _status(404, "NotFound", f'resourceclaims.resource.k8s.io "{name}" not found')
                return 200, copy.deepcopy(claim)
            if path == f"{RESOURCE}/resourceslices":
                if method == "GET":
                    wanted = dict(
                        term.split("=", 1)
                        for term in ",".join(query.get("fieldSelector", [])).split(",")
                        if term
                    )
                    items = [
                        copy.deepcopy(s)
                        for s in api.slices.values()
                        if all(_field(s, key) == value for key, value in wanted.items())
                    ]
                    return 200, {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceSliceList",
                        "items": items,
                    }
                if method == "POST":
                    name = body["metadata"]["name"]
                    if name in api.slices:
                        return 409, _status(409, "AlreadyExists", f'resourceslices "{name}" already exists')
                    body["metadata"]["resourceVersion"] = api.next_version()
                    api.slices[name] = body
                    return 201, copy.deepcopy(body)
            if path.startswith(f"{RESOURCE}/resourceslices/"):
                name = parts[-1]
                current = api.slices.get(name)
                if current is None:
                    return 404, _status(404, "NotFound", f'resourceslices "{name}" not found')
                if method == "PUT":
                    if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                        return 409, _status(409, "Conflict", "the object has been modified")
                    body["metadata"]["resourceVersion"] = api.next_version()
                    api.slices[name] = body
                    return 200, copy.deepcopy(body)
                if method == "DELETE":
                    del api.slices[name]
                    return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
            return 404, _status(404, "NotFound", f"{method} {path} is not served by the fake")

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler


def _field(obj: dict[str, Any], dotted: str) -> Any:
    value: Any = obj
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value
