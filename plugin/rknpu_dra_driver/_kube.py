"""The API server seam: the official `kubernetes` client's ResourceV1Api and CoreV1Api, as raw JSON
(no model classes), every request bounded by ``timeout`` and never retried behind our back."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from rknnlaunch import RknnLaunchError

from ._log import get_logger

RESOURCE_GROUP_VERSION = "resource.k8s.io/v1"
_RESOURCE_CALLS = frozenset(
    {
        "read_namespaced_resource_claim",
        "list_resource_slice",
        "create_resource_slice",
        "replace_resource_slice",
        "delete_resource_slice",
    }
)
_log = get_logger("api")


class ApiError(Exception):
    """A request failed (down, slow, refused); ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def make_api_client(kubeconfig: str, timeout: float) -> Any:
    """A `kubernetes.client.ApiClient` from ``kubeconfig`` (a file), else the in-cluster service account."""
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

    Importing the official client takes most of the driver's start (it loads every API model), so
    `start` builds it on a thread while the kubelet sockets already serve prepared claims from the
    checkpoint; a call made before the client is ready waits for it within ``timeout``.
    """

    def __init__(self, kubeconfig: str, timeout: float) -> None:
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        self._ready = threading.Event()
        self._error: str | None = None
        self._resource: Any = None
        self._core: Any = None
        self._version: Any = None
        self._watches: set[Any] = set()
        self._watches_lock = threading.Lock()
        self.on_ready: Callable[[], None] = lambda: None
        """Called once the client is built (the slice publisher retries at once)."""

    def check_config(self) -> None:
        """The cheap up-front check (a missing kubeconfig file is a start error, not a log line)."""
        if self.kubeconfig and not os.path.isfile(self.kubeconfig):
            raise RknnLaunchError(
                f"kubeconfig {self.kubeconfig} is not a file",
                "pass --kubeconfig (env RKNPU_DRA_KUBECONFIG or KUBECONFIG) naming a kubeconfig, or "
                "leave both unset to use the in-cluster service account",
            )

    def connect(self) -> None:
        """Build the client now (raises RknnLaunchError on a bad configuration)."""
        try:
            from kubernetes import client

            api_client = make_api_client(self.kubeconfig, self.timeout)
            self._resource = client.ResourceV1Api(api_client)
            self._core = client.CoreV1Api(api_client)
            self._version = client.VersionApi(api_client)
        except RknnLaunchError as exc:
            self._error = f"{exc.problem}; {exc.fix}"
            raise
        finally:
            self._ready.set()
        self.on_ready()

    def start(self) -> threading.Thread:
        """`connect` on a thread; a failure is logged once and every call then raises ApiError."""

        def connect_logged() -> None:
            try:
                self.connect()
            except RknnLaunchError as exc:
                _log.error("no API client", extra={"fields": {"error": str(exc)}})

        thread = threading.Thread(target=connect_logged, name="api-client", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        """Stopping: a call waiting for the client returns (with ApiError) at once."""
        if not self._ready.is_set():
            self._error = "the driver is stopping"
        self._ready.set()
        self.end_watches()

    def end_watches(self) -> None:
        """Cut every open watch (a stop, or the tests' outage): their iterators end with ApiError."""
        with self._watches_lock:
            watches = list(self._watches)
        for response in watches:
            with contextlib.suppress(Exception):
                response.shutdown()

    def wait_ready(self, timeout: float) -> bool:
        """Wait for the client to be built (or to have failed); True if it is usable."""
        return self._ready.wait(timeout) and self._error is None

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self._error is None

    def _apis(self, what: str) -> tuple[Any, Any]:
        if not self._ready.wait(self.timeout):
            raise ApiError(f"{what}: the API client is still starting")
        if self._error is not None:
            raise ApiError(f"{what}: {self._error}")
        return self._resource, self._core

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        resource, core = self._apis(what)
        try:
            response = getattr(resource if method in _RESOURCE_CALLS else core, method)(
                *args, _preload_content=False, _request_timeout=self.timeout, **kwargs
            )
            data = response.data
            return json.loads(data) if data else {}
        except ApiException as exc:
            reason = _status_message(exc.body) or exc.reason
            raise ApiError(f"{what}: HTTP {exc.status} {reason}", exc.status) from None
        except ValueError as exc:
            raise ApiError(f"{what}: the API server's answer is not JSON ({exc})") from None
        except Exception as exc:  # urllib3's connection, timeout and protocol errors
            raise ApiError(f"{what}: {type(exc).__name__}: {_short(exc)}") from None

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim, or None when it does not exist (404)."""
        try:
            claim: dict[str, Any] = self._call(
                f"get ResourceClaim {namespace}/{name}",
                "read_namespaced_resource_claim",
                name,
                namespace,
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return claim

    def get_node(self, name: str) -> dict[str, Any] | None:
        try:
            node: dict[str, Any] = self._call(f"get Node {name}", "read_node", name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return node

    def list_slices(self, node_name: str, driver_name: str) -> list[dict[str, Any]]:
        listing = self._call(
            "list ResourceSlices",
            "list_resource_slice",
            field_selector=f"spec.nodeName={node_name},spec.driver={driver_name}",
        )
        items = listing.get("items") or []
        return [item for item in items if isinstance(item, dict)]

    def watch_slices(
        self, node_name: str, driver_name: str, timeout_seconds: int = 300
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """The node's slices as watch events (type, object), raw JSON: a watch without a
        resourceVersion starts with an ADDED event per existing slice, then every change, until
        the server ends it after ``timeout_seconds``. Raises ApiError when it cannot start or breaks."""
        from kubernetes.client.exceptions import ApiException

        what = "watch ResourceSlices"
        resource, _core = self._apis(what)
        try:
            response = resource.list_resource_slice(
                field_selector=f"spec.nodeName={node_name},spec.driver={driver_name}",
                watch=True,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                _preload_content=False,
                _request_timeout=(self.timeout, timeout_seconds + self.timeout),
            )
        except ApiException as exc:
            reason = _status_message(exc.body) or exc.reason
            raise ApiError(f"{what}: HTTP {exc.status} {reason}", exc.status) from None
        except Exception as exc:
            raise ApiError(f"{what}: {type(exc).__name__}: {_short(exc)}") from None
        with self._watches_lock:
            self._watches.add(response)
        try:
            pending = b""
            for chunk in response.stream(None):
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
                self._watches.discard(response)
            with contextlib.suppress(Exception):
                response.release_conn()

    def server_minor(self) -> int | None:
        """The API server's minor version (/version), None when it cannot be told."""
        try:
            _resource, _core = self._apis("get /version")
            response = self._version.get_code(_preload_content=False, _request_timeout=self.timeout)
            minor = str(json.loads(response.data).get("minor", ""))
        except Exception:  # best effort: the layout then assumes a current server
            return None
        digits = "".join(ch for ch in minor if ch.isdigit())
        return int(digits) if digits else None

    def create_slice(self, body: Mapping[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self._call("create ResourceSlice", "create_resource_slice", body)
        return created

    def replace_slice(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        replaced: dict[str, Any] = self._call(
            f"update ResourceSlice {name}", "replace_resource_slice", name, body
        )
        return replaced

    def delete_slice(self, name: str) -> None:
        try:
            self._call(f"delete ResourceSlice {name}", "delete_resource_slice", name)
        except ApiError as exc:
            if exc.status != 404:
                raise


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
