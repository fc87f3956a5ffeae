"""A fake Kubernetes API server on loopback for the DRA driver's tests: the few resource.k8s.io/v1
and core/v1 endpoints the driver calls, spoken to by the real `kubernetes` client.

Paths, verbs, the ``fieldSelector`` on ResourceSlices, ``resourceVersion`` conflicts (409) and the
Status body of errors follow the Kubernetes API reference for resource.k8s.io/v1 (the shapes in
kubernetes/api resource/v1/types.go); `down` and `delay` emulate an unreachable or slow server.

Watches are real: ``?watch=true`` answers a chunked stream of newline-separated watch events
(apimachinery's metav1.WatchEvent: ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object"}``);
a watch without a resourceVersion starts with an ADDED event per existing object (the API server's
"most recent" semantics), ends after ``timeoutSeconds``, and is cut when the server goes `down`.
``drop_fields`` names slice spec fields the server drops on write (a server whose feature gate is
off: ``sharedCounters``, ``consumesCounters`` in devices, ``taints`` in devices).
``?dryRun=All`` on a slice create or replace answers what would be stored (the dropped fields
gone) but stores nothing and makes no watch event; `dry_runs` counts them. A ``minor`` below 34
serves no resource.k8s.io/v1 (404 on its paths), as a Kubernetes 1.33 or older API server.
``version_status`` (e.g. 500 or 404) makes ``/version`` fail with that code: a server whose
version cannot be told; set it back to None and ``/version`` answers again.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.parse
from collections.abc import Collection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RESOURCE = "/apis/resource.k8s.io/v1"
RESOURCE_V1_FROM_MINOR = 34


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out went away mid-answer (the slow-server tests): not an error here.
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeApiServer:
    def __init__(
        self,
        drop_fields: Collection[str] = (),
        minor: int = 35,
        keep_taints: bool = False,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        # Device taints are alpha (feature gate DRADeviceTaints, off by default): dropped unless asked.
        self.drop_fields = frozenset(drop_fields) | (frozenset() if keep_taints else {"taints"})
        self.minor = minor
        self.version_status: int | None = None
        """When set: the HTTP code /version fails with (the version cannot be told)."""
        self.events: list[tuple[str, dict[str, Any]]] = []
        """Every slice change as a watch event, in order (watches replay from here)."""
        self.event_times: list[float] = []
        self.device_counts: list[int] = []
        """After each event: the devices all slices offer (how long a node had none)."""
        self.watching = 0
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.slices: dict[str, dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.dry_runs = 0
        """Slice creates and replaces asked with ?dryRun=All (answered, never stored)."""
        self.authorizations: set[str] = set()
        self.down = False
        self.delay = 0.0
        self._version = 0
        self._server = _QuietServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.ca: Path | None = None
        if tls is not None:  # (certificate, key): HTTPS, as every real API server
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self.ca = tls[0]
        self._thread = threading.Thread(target=self._server.serve_forever, name="fakeapi", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{'https' if self.ca else 'http'}://{host!s}:{port}"

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def set_down(self, down: bool) -> None:
        """An outage: every request fails with 503 and open watches are cut."""
        with self.changed:
            self.down = down
            self.changed.notify_all()

    def stop(self) -> None:
        self.set_down(True)
        self._server.shutdown()
        self._server.server_close()

    def kubeconfig(self, path: Path) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": self._cluster()}],
            "users": [{"name": "driver", "user": {"token": "test-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "driver"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))
        return path

    def _cluster(self) -> dict[str, Any]:
        cluster: dict[str, Any] = {"server": self.url}
        if self.ca is not None:
            import base64

            cluster["certificate-authority-data"] = base64.b64encode(self.ca.read_bytes()).decode()
        return cluster

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

    def slice_event(self, kind: str, obj: dict[str, Any]) -> None:
        """Record a change (call with the lock held), and when it happened."""
        self.events.append((kind, copy.deepcopy(obj)))
        self.event_times.append(time.monotonic())
        self.device_counts.append(
            sum(len((s.get("spec") or {}).get("devices") or []) for s in self.slices.values())
        )

    def put_slice(self, name: str, edit: Any) -> None:
        """Someone else edits a slice: ``edit(slice)`` changes it in place (a new resourceVersion)."""
        with self.changed:
            current = self.slices[name]
            edit(current)
            current["metadata"]["resourceVersion"] = self.next_version()
            self.slice_event("MODIFIED", current)
            self.changed.notify_all()

    def delete_slices(self, node_name: str | None = None) -> list[str]:
        """Someone else deletes slices (all, or the node's: what the kubelet does at its start)."""
        with self.changed:
            gone = [
                name
                for name, s in self.slices.items()
                if node_name is None or _field(s, "spec.nodeName") == node_name
            ]
            for name in gone:
                self.slice_event("DELETED", self.slices.pop(name))
            self.changed.notify_all()
        return gone

    def longest_without_devices(self, since: float, until: float) -> float:
        """The longest stretch in [since, until] during which no slice offered a device."""
        with self.lock:
            points = list(zip(self.event_times, self.device_counts, strict=True))
        longest, empty_from = 0.0, None
        count_before = next((c for t, c in reversed(points) if t < since), 0)
        if count_before == 0:
            empty_from = since
        for at, count in points:
            if at < since or at > until:
                continue
            if count == 0 and empty_from is None:
                empty_from = at
            elif count > 0 and empty_from is not None:
                longest, empty_from = max(longest, at - empty_from), None
        if empty_from is not None:
            longest = max(longest, until - empty_from)
        return longest

    def delete_slices_named(self, *names: str) -> None:
        with self.changed:
            for name in names:
                self.slice_event("DELETED", self.slices.pop(name))
            self.changed.notify_all()

    def wait_watching(self, count: int = 1, timeout: float = 60.0) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: self.watching >= count, timeout):
                raise TimeoutError(f"{count} watch(es) never opened")

    def wait_request(self, method: str, path: str, since: int, timeout: float = 60.0) -> None:
        """Wait until request ``method path`` arrived after the first ``since`` requests (it may
        still be in flight: a slow server answers it ``delay`` seconds later)."""
        with self.changed:
            if not self.changed.wait_for(lambda: (method, path) in self.requests[since:], timeout):
                raise AssertionError(f"no {method} {path} within {timeout} s")

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
            with api.changed:
                api.requests.append((method, url.path))
                api.authorizations.add(self.headers.get("Authorization") or "")
                delay, down = api.delay, api.down
                api.changed.notify_all()  # wait_request
            if delay:
                time.sleep(delay)  # the emulated slow server (the client's timeout is under test)
            if down:
                self._send(503, _status(503, "ServiceUnavailable", "the fake API server is down"))
                return
            query = urllib.parse.parse_qs(url.query)
            if method == "GET" and url.path == f"{RESOURCE}/resourceslices" and _flag(query, "watch"):
                self._watch(query)
                return
            with api.changed:
                code, answer = self._route(method, url.path, query, body)
                api.changed.notify_all()
            self._send(code, answer)

        def _watch(self, query: dict[str, list[str]]) -> None:
            wanted = _selector(query)
            timeout = float((query.get("timeoutSeconds") or ["1800"])[0])
            deadline = time.monotonic() + timeout
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            with api.changed:
                since = (query.get("resourceVersion") or [""])[0]
                if since and since != "0":
                    # Replay what changed after that version (the fake keeps its whole history).
                    pending = [
                        (kind, obj)
                        for kind, obj in api.events
                        if int(obj["metadata"]["resourceVersion"]) > int(since)
                    ]
                else:
                    pending = [("ADDED", copy.deepcopy(s)) for s in api.slices.values()]
                seen = len(api.events)
                api.watching += 1
                api.changed.notify_all()
            try:
                while True:
                    for kind, obj in pending:
                        if all(_field(obj, key) == value for key, value in wanted.items()):
                            self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                    with api.changed:
                        api.changed.wait_for(
                            lambda seen=seen: (
                                len(api.events) > seen  # type: ignore[misc]
                                or api.down
                                or time.monotonic() >= deadline
                            ),
                            max(deadline - time.monotonic(), 0),
                        )
                        if api.down or time.monotonic() >= deadline:
                            break
                        pending, seen = api.events[seen:], len(api.events)
                if not api.down:
                    self._chunk(b"")  # the end of the chunked body: the server ended the watch
            except OSError:
                pass  # the client went away
            finally:
                with api.changed:
                    api.watching -= 1
                    api.changed.notify_all()
            self.close_connection = True

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _route(
            self, method: str, path: str, query: dict[str, list[str]], body: dict[str, Any]
        ) -> tuple[int, dict[str, Any]]:
            parts = path.strip("/").split("/")
            if path.rstrip("/") == "/version" and method == "GET":  # the client asks "/version/"
                if api.version_status is not None:
                    code = api.version_status
                    return code, _status(code, "InternalError" if code >= 500 else "NotFound", "no version")
                return 200, {"major": "1", "minor": str(api.minor), "gitVersion": f"v1.{api.minor}.0"}
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
            if path.startswith(RESOURCE) and api.minor < RESOURCE_V1_FROM_MINOR:
                return 404, _status(404, "NotFound", "the server could not find the requested resource")
            dry_run = (query.get("dryRun") or [""])[0] == "All"
            if path == f"{RESOURCE}/resourceslices":
                if method == "GET":
                    wanted = _selector(query)
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
                    if dry_run:  # what would be stored, nothing stored (no resourceVersion yet)
                        api.dry_runs += 1
                        _drop(body, api.drop_fields)
                        return 201, body
                    body["metadata"]["resourceVersion"] = api.next_version()
                    _drop(body, api.drop_fields)
                    api.slices[name] = body
                    api.slice_event("ADDED", body)
                    return 201, copy.deepcopy(body)
            if path.startswith(f"{RESOURCE}/resourceslices/"):
                name = parts[-1]
                current = api.slices.get(name)
                if current is None:
                    return 404, _status(404, "NotFound", f'resourceslices "{name}" not found')
                if method == "PUT":
                    if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                        return 409, _status(409, "Conflict", "the object has been modified")
                    if dry_run:  # the stored object and its resourceVersion stay
                        api.dry_runs += 1
                        _drop(body, api.drop_fields)
                        return 200, body
                    body["metadata"]["resourceVersion"] = api.next_version()
                    _drop(body, api.drop_fields)
                    api.slices[name] = body
                    api.slice_event("MODIFIED", body)
                    return 200, copy.deepcopy(body)
                if method == "DELETE":
                    api.slice_event("DELETED", api.slices.pop(name))
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


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return (query.get(name) or [""])[0].lower() in ("true", "1")


def _selector(query: dict[str, list[str]]) -> dict[str, str]:
    return dict(term.split("=", 1) for term in ",".join(query.get("fieldSelector", [])).split(",") if term)


def _drop(body: dict[str, Any], fields: frozenset[str]) -> None:
    """What a server without the feature gate does: the fields are silently not stored."""
    spec = body.get("spec") or {}
    for name in fields:
        spec.pop(name, None)
        for device in spec.get("devices") or []:
            device.pop(name, None)


def _field(obj: dict[str, Any], dotted: str) -> Any:
    value: Any = obj
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value
