"""The API server seam: the official `kubernetes` client's ResourceV1Api and CoreV1Api, as raw JSON
(no model classes), every request bounded by ``timeout`` and never retried behind our back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rknnlaunch import RknnLaunchError

RESOURCE_GROUP_VERSION = "resource.k8s.io/v1"


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
    """The requests the driver makes; each returns the object as JSON or raises ApiError."""

    def __init__(self, api_client: Any, timeout: float) -> None:
        from kubernetes import client

        self._resource = client.ResourceV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self.timeout = timeout

    def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            response = method(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
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
                self._resource.read_namespaced_resource_claim,
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
            node: dict[str, Any] = self._call(f"get Node {name}", self._core.read_node, name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return node

    def list_slices(self, node_name: str, driver_name: str) -> list[dict[str, Any]]:
        listing = self._call(
            "list ResourceSlices",
            self._resource.list_resource_slice,
            field_selector=f"spec.nodeName={node_name},spec.driver={driver_name}",
        )
        items = listing.get("items") or []
        return [item for item in items if isinstance(item, dict)]

    def create_slice(self, body: Mapping[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self._call(
            "create ResourceSlice", self._resource.create_resource_slice, body
        )
        return created

    def replace_slice(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        replaced: dict[str, Any] = self._call(
            f"update ResourceSlice {name}", self._resource.replace_resource_slice, name, body
        )
        return replaced

    def delete_slice(self, name: str) -> None:
        try:
            self._call(f"delete ResourceSlice {name}", self._resource.delete_resource_slice, name)
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
