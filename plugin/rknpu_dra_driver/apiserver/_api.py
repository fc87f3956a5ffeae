"""The API server seam: the few resource.k8s.io/v1 and core/v1 requests and the slice watch, as
raw JSON (no model classes), every request bounded by ``timeout`` and never retried behind our
back, over the light transport or the official `kubernetes` client (`_transports`)."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from rknnlaunch import RknnLaunchError

from .._log import get_logger
from ._kubeconfig import kubeconfig_paths
from ._transports import HttpError, Query, Stream, Transport

RESOURCE_GROUP_VERSION = "resource.k8s.io/v1"
RESOURCE_PATH = f"/apis/{RESOURCE_GROUP_VERSION}"
STOPPING = "the driver is stopping"
_log = get_logger("api")


class ApiError(Exception):
    """A request failed (down, slow, refused); ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def make_api_client(kubeconfig: str, timeout: float) -> Any:
    """A `kubernetes.client.ApiClient` from ``kubeconfig`` (a file, or kubectl's colon-separated list,
    which the client merges as kubectl does), else the in-cluster service account."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            config.load_incluster_config(client_configuration=configuration)
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster service account"
        raise RknnLaunchError(
            f"cannot configure the API client from {where}: {exc}",
            "pass --kubeconfig (env RKNPU_DRA_KUBECONFIG or KUBECONFIG), "
            "or run in a pod with a service account",
        ) from None
    # One attempt per call: the caller's deadline (the kubelet's) is the budget, not urllib3's retries.
    configuration.retries = 0
    return client.ApiClient(configuration)


class KubeApi:
    """The requests the driver makes; each returns the object as JSON or raises ApiError.

    The light transport (`_transports`) starts in milliseconds, so the slice goes up right after
    discovery; a configuration it does not speak (exec/auth-provider credentials, a proxy) loads
    the official client instead, on a thread while the kubelet sockets already serve prepared
    claims from the checkpoint. A call made before either is ready waits for it within ``timeout``.
    """

    def __init__(self, kubeconfig: str, timeout: float, transport: str = "auto") -> None:
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        self.transport_choice = transport
        """"auto" (light when it can), "kubernetes-client" (always the official client)."""
        self._ready = threading.Event()
        self._error: str | None = None
        self._transport: Transport | None = None
        self._watches: set[Stream] = set()
        self._watches_lock = threading.Lock()
        self._stopped_threads: set[threading.Thread] = set()
        self.on_ready: Callable[[], None] = lambda: None
        """Called once the client is built (the slice publisher retries at once)."""

    @property
    def transport(self) -> str:
        return self._transport.name if self._transport is not None else ""

    def check_config(self) -> None:
        """The cheap up-front check (a missing kubeconfig file is a start error, not a log line);
        each file of kubectl's colon-separated list is checked, the official client merges them."""
        for path in kubeconfig_paths(self.kubeconfig):
            if not path.is_file():
                raise RknnLaunchError(
                    f"kubeconfig {path} is not a file",
                    "pass --kubeconfig (env RKNPU_DRA_KUBECONFIG or KUBECONFIG) naming a kubeconfig, or "
                    "leave both unset to use the in-cluster service account",
                )

    def _light(self) -> Transport | None:
        if self.transport_choice != "auto":
            return None
        from ._transports import HttpTransport, light_endpoint

        try:
            # The service account's conventional variables, as every Kubernetes client reads them.
            endpoint = light_endpoint(
                self.kubeconfig,
                os.environ.get("KUBERNETES_SERVICE_HOST", ""),
                os.environ.get("KUBERNETES_SERVICE_PORT", ""),
            )
        except (OSError, ValueError, TypeError, KeyError, ssl.SSLError) as exc:
            _log.debug("light API transport unusable", extra={"fields": {"error": str(exc)}})
            return None  # the official client says what is wrong, in its words
        return HttpTransport(endpoint) if endpoint is not None else None

    def connect(self) -> None:
        """Build the transport now (raises RknnLaunchError on a bad configuration)."""
        try:
            transport = self._light()
            if transport is None:
                from ._transports import ClientTransport

                transport = ClientTransport(make_api_client(self.kubeconfig, self.timeout))
            self._transport = transport
        except RknnLaunchError as exc:
            self._error = f"{exc.problem}; {exc.fix}"
            raise
        finally:
            self._ready.set()
        _log.debug("API transport ready", extra={"fields": {"transport": self.transport}})
        self.on_ready()

    def close(self) -> None:
        """Stopping: a call waiting for the client returns (with ApiError) at once."""
        if not self._ready.is_set():
            self._error = STOPPING
        self._ready.set()
        self.end_watches()

    def end_watches(self) -> None:
        """Cut every open watch (a stop, or the tests' outage): their iterators end with ApiError."""
        with self._watches_lock:
            watches = list(self._watches)
        for stream in watches:
            with contextlib.suppress(Exception):
                stream.close()

    def stop_calls_of(self, *threads: threading.Thread | None) -> None:
        """A loop stops: the calls its ``threads`` are waiting on fail now, and their later calls at
        once (ApiError), so the loop ends within its stop budget even on a slow API server.
        Other callers (a prepare in flight) are left alone."""
        stopping = {thread for thread in threads if thread is not None}
        with self._watches_lock:
            self._stopped_threads |= stopping
        if self._transport is not None:
            self._transport.cut(stopping)

    def wait_ready(self, timeout: float) -> bool:
        """Wait for the client to be built (or to have failed); True if it is usable."""
        return self._ready.wait(timeout) and self._error is None

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self._error is None

    def _use(self, what: str) -> Transport:
        if threading.current_thread() in self._stopped_threads:
            raise ApiError(f"{what}: stopping")
        if not self._ready.wait(self.timeout):
            raise ApiError(f"{what}: the API client is still starting")
        if self._error is not None or self._transport is None:
            raise ApiError(f"{what}: {self._error}")
        return self._transport

    def _call(
        self, what: str, verb: str, path: str, query: Query = (), body: Mapping[str, Any] | None = None
    ) -> Any:
        transport = self._use(what)
        try:
            data = transport.request(verb, path, query, body, self.timeout)
            return json.loads(data) if data else {}
        except HttpError as exc:
            raise _api_error(what, exc) from None
        except ValueError as exc:
            raise ApiError(f"{what}: the API server's answer is not JSON ({exc})") from None

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim, or None when it does not exist (404)."""
        try:
            claim: dict[str, Any] = self._call(
                f"get ResourceClaim {namespace}/{name}",
                "GET",
                f"{RESOURCE_PATH}/namespaces/{_q(namespace)}/resourceclaims/{_q(name)}",
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return claim

    def get_node(self, name: str) -> dict[str, Any] | None:
        try:
            node: dict[str, Any] = self._call(f"get Node {name}", "GET", f"/api/v1/nodes/{_q(name)}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return node

    def list_slices(self, node_name: str, driver_name: str) -> list[dict[str, Any]]:
        listing = self._call(
            "list ResourceSlices",
            "GET",
            f"{RESOURCE_PATH}/resourceslices",
            [("fieldSelector", _slice_selector(node_name, driver_name))],
        )
        items = listing.get("items") or []
        return [item for item in items if isinstance(item, dict)]

    def watch_slices(
        self, node_name: str, driver_name: str, timeout_seconds: int = 300
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """The node's slices as watch events (type, object), raw JSON: a watch without a
        resourceVersion starts with an ADDED event per existing slice, then every change, until
        the server ends it after ``timeout_seconds``. Raises ApiError when it cannot start or breaks."""
        what = "watch ResourceSlices"
        transport = self._use(what)
        query = [
            ("fieldSelector", _slice_selector(node_name, driver_name)),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        try:
            stream = transport.stream(
                f"{RESOURCE_PATH}/resourceslices", query, (self.timeout, timeout_seconds + self.timeout)
            )
        except HttpError as exc:
            raise _api_error(what, exc) from None
        with self._watches_lock:
            self._watches.add(stream)
        try:
            pending = b""
            for chunk in stream.chunks():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        raise ApiError(f"{what}: {obj.get('message') or obj}", obj.get("code"))
                    yield str(kind), obj
        except ApiError:
            raise
        except ValueError as exc:
            raise ApiError(f"{what}: an event is not JSON ({exc})") from None
        except Exception as exc:  # the connection broke (an outage, or end_watches)
            raise ApiError(f"{what}: {type(exc).__name__}: {_short(exc)}") from None
        finally:
            with self._watches_lock:
                self._watches.discard(stream)
            stream.close()

    def server_minor(self) -> int | None:
        """The API server's minor version (/version), None when it cannot be told."""
        try:
            minor = str(self._call("get /version", "GET", "/version").get("minor", ""))
        except ApiError:  # best effort: the layout then assumes a current server
            return None
        digits = "".join(ch for ch in minor if ch.isdigit())
        return int(digits) if digits else None

    def create_slice(self, body: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """The slice as stored; ``dry_run``: as it would be stored (``?dryRun=All``: admitted,
        defaulted, gated fields dropped, but nothing stored and no watch event)."""
        created: dict[str, Any] = self._call(
            "create ResourceSlice" + (" (dry run)" if dry_run else ""),
            "POST",
            f"{RESOURCE_PATH}/resourceslices",
            _dry_run(dry_run),
            body=body,
        )
        return created

    def replace_slice(self, name: str, body: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        replaced: dict[str, Any] = self._call(
            f"update ResourceSlice {name}" + (" (dry run)" if dry_run else ""),
            "PUT",
            f"{RESOURCE_PATH}/resourceslices/{_q(name)}",
            _dry_run(dry_run),
            body=body,
        )
        return replaced

    def delete_slice(self, name: str) -> None:
        try:
            self._call(f"delete ResourceSlice {name}", "DELETE", f"{RESOURCE_PATH}/resourceslices/{_q(name)}")
        except ApiError as exc:
            if exc.status != 404:
                raise


def _dry_run(dry_run: bool) -> Query:
    return [("dryRun", "All")] if dry_run else []


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _slice_selector(node_name: str, driver_name: str) -> str:
    return f"spec.nodeName={node_name},spec.driver={driver_name}"


def _api_error(what: str, exc: HttpError) -> ApiError:
    if exc.status is None:
        return ApiError(f"{what}: {_short(exc)}")
    reason = _status_message(exc.body) or str(exc)
    return ApiError(f"{what}: HTTP {exc.status} {reason}", exc.status)


def _status_message(body: object) -> str | None:
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str):
        return None
    try:
        status = json.loads(body)
    except ValueError:
        return None
    message = status.get("message") if isinstance(status, dict) else None
    return str(message) if message else None


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:297] + "..."
