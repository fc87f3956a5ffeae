"""How requests reach the API server: a light HTTP transport (http.client, a kubeconfig's or the
service account's token and certificates) that starts in milliseconds, and the official
`kubernetes` client's generic `call_api` for what the light one does not speak (exec and
auth-provider credentials, proxies). Both move raw JSON bytes; neither retries."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import select
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ._kubeconfig import read_kubeconfig

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_S = 60.0
"""Bound service-account tokens rotate: the file is read again this often (as client-go does)."""

Query = Sequence[tuple[str, str]]


class HttpError(Exception):
    """The server answered with an error status (``body`` its Status JSON), or did not answer
    (``status`` None)."""

    def __init__(self, message: str, status: int | None = None, body: bytes = b"") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class Stream(Protocol):
    def chunks(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class Transport(Protocol):
    name: str

    def request(
        self, verb: str, path: str, query: Query, body: Mapping[str, Any] | None, timeout: float
    ) -> bytes:
        """The answer's body; raises HttpError."""
        ...

    def stream(self, path: str, query: Query, timeout: tuple[float, float]) -> Stream:
        """An open streamed GET (a watch); raises HttpError."""
        ...

    def cut(self, threads: Collection[threading.Thread]) -> None:
        """Make the requests ``threads`` are waiting on fail now (HttpError): a stopping loop."""
        ...


# --- the light transport --------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """Where the API server is and how we authenticate, from a kubeconfig or the service account."""

    scheme: str
    host: str
    port: int
    base_path: str
    ssl_context: ssl.SSLContext | None
    token: str = ""
    token_file: str = ""
    server_name: str | None = None


def _pem_file(folder: str, name: str, data: str) -> str:
    path = os.path.join(folder, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(base64.b64decode(data))
    return path


def _context(
    ca_file: str | None,
    ca_data: str | None,
    cert_file: str | None,
    cert_data: str | None,
    key_file: str | None,
    key_data: str | None,
    insecure: bool,
) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    if ca_data:
        context.load_verify_locations(cadata=base64.b64decode(ca_data).decode())
    if cert_file or cert_data:
        with tempfile.TemporaryDirectory(prefix="rknpu-dra-") as folder:
            cert = cert_file or _pem_file(folder, "cert.pem", str(cert_data))
            key = key_file or (_pem_file(folder, "key.pem", str(key_data)) if key_data else None)
            context.load_cert_chain(cert, key)
    return context


def _endpoint(server: str, context: ssl.SSLContext | None, **auth: Any) -> Endpoint:
    parts = urllib.parse.urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"server {server!r} is not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Endpoint(
        parts.scheme,
        parts.hostname,
        port,
        parts.path.rstrip("/"),
        context if parts.scheme == "https" else None,
        **auth,
    )


def light_endpoint(kubeconfig: str, in_cluster_host: str, in_cluster_port: str) -> Endpoint | None:
    """The Endpoint of a kubeconfig (its current context; kubectl's colon-separated list merged as
    kubectl does), or of the in-cluster service account when ``kubeconfig`` is ""; None when it
    needs the official client (exec or auth-provider credentials, a proxy, basic auth). Raises
    OSError/ValueError on a broken configuration."""
    if not kubeconfig:
        if not in_cluster_host:
            raise ValueError("KUBERNETES_SERVICE_HOST is not set (not in a pod?)")
        host = f"[{in_cluster_host}]" if ":" in in_cluster_host else in_cluster_host
        ca = _context(str(SERVICE_ACCOUNT / "ca.crt"), None, None, None, None, None, False)
        return _endpoint(
            f"https://{host}:{in_cluster_port or '443'}", ca, token_file=str(SERVICE_ACCOUNT / "token")
        )
    config = read_kubeconfig(kubeconfig)
    context = config.named("context", config.current_context)
    cluster = config.named("cluster", str(context.get("cluster") or ""))
    user = config.named("user", str(context["user"])) if context.get("user") else {}
    if user.get("exec") or user.get("auth-provider") or user.get("username") or cluster.get("proxy-url"):
        return None
    ssl_context = _context(
        config.path(cluster, "certificate-authority"),
        cluster.get("certificate-authority-data"),
        config.path(user, "client-certificate"),
        user.get("client-certificate-data"),
        config.path(user, "client-key"),
        user.get("client-key-data"),
        bool(cluster.get("insecure-skip-tls-verify")),
    )
    return _endpoint(
        str(cluster.get("server") or ""),
        ssl_context,
        token=str(user.get("token") or ""),
        token_file=config.path(user, "tokenFile") or "",
        server_name=cluster.get("tls-server-name"),
    )


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether the server closed an idle kept-alive connection (readable with no request = EOF)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _w, _x = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class _HttpStream:
    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._response = response

    def chunks(self) -> Iterator[bytes]:
        while True:
            data = self._response.read1(65536)
            if not data:
                return
            yield data

    def close(self) -> None:
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._conn.close()


class HttpTransport:
    """A pool of kept-alive connections: a call takes an idle one (or opens one) and gives it back,
    so there are as many as calls ever ran at once (one, for the kubelet's serialized prepares)."""

    name = "light"

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._idle: list[http.client.HTTPConnection] = []
        self._idle_lock = threading.Lock()
        self._busy: dict[http.client.HTTPConnection, threading.Thread] = {}
        """Connections with a request in flight, and the thread waiting on each (`cut`)."""
        self._token = endpoint.token
        self._token_read = 0.0
        self._token_lock = threading.Lock()

    def _auth(self) -> dict[str, str]:
        if self._endpoint.token_file:
            with self._token_lock:
                if time.monotonic() - self._token_read > TOKEN_REREAD_S or not self._token:
                    self._token = Path(self._endpoint.token_file).read_text(encoding="utf-8").strip()
                    self._token_read = time.monotonic()
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        e = self._endpoint
        if e.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                e.host, e.port, timeout=timeout, context=e.ssl_context
            )
        else:
            conn = http.client.HTTPConnection(e.host, e.port, timeout=timeout)
        return conn

    def _send(
        self,
        conn: http.client.HTTPConnection,
        verb: str,
        path: str,
        query: Query,
        body: Mapping[str, Any] | None,
    ) -> http.client.HTTPResponse:
        url = self._endpoint.base_path + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": "application/json", "User-Agent": "rknpu-dra-driver", **self._auth()}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(verb, url, body=data, headers=headers)
        if conn.sock is not None:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn.getresponse()

    def request(
        self, verb: str, path: str, query: Query, body: Mapping[str, Any] | None, timeout: float
    ) -> bytes:
        conn: http.client.HTTPConnection | None = None
        with self._idle_lock:
            while self._idle and conn is None:
                conn = self._idle.pop()
                if _dropped(conn):
                    conn.close()
                    conn = None
        if conn is None:
            conn = self._connect(timeout)
        with self._idle_lock:
            self._busy[conn] = threading.current_thread()
        try:
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            else:
                conn.timeout = timeout
            response = self._send(conn, verb, path, query, body)
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise HttpError(f"{type(exc).__name__}: {exc}") from None
        finally:
            with self._idle_lock:
                self._busy.pop(conn, None)
        if response.will_close:
            conn.close()
        else:
            with self._idle_lock:
                self._idle.append(conn)
        if response.status >= 400:
            raise HttpError(response.reason, response.status, data)
        return data

    def cut(self, threads: Collection[threading.Thread]) -> None:
        with self._idle_lock:
            cut = [conn for conn, thread in self._busy.items() if thread in threads]
        for conn in cut:  # the blocked read or write returns at once, with an OSError
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def stream(self, path: str, query: Query, timeout: tuple[float, float]) -> Stream:
        conn = self._connect(timeout[0])
        try:
            conn.connect()
            response = self._send(conn, "GET", path, query, None)
            if conn.sock is not None:
                conn.sock.settimeout(timeout[1])
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise HttpError(f"{type(exc).__name__}: {exc}") from None
        if response.status >= 400:
            data = response.read()
            conn.close()
            raise HttpError(response.reason, response.status, data)
        return _HttpStream(conn, response)


# --- the official client --------------------------------------------------------------------


class _ClientStream:
    def __init__(self, response: Any) -> None:
        self._response = response

    def chunks(self) -> Iterator[bytes]:
        chunks: Iterator[bytes] = self._response.stream(None)
        return chunks

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._response.shutdown()
        with contextlib.suppress(Exception):
            self._response.release_conn()


class ClientTransport:
    """The official client's ApiClient.call_api: no model classes, raw bytes, the client's auth."""

    name = "kubernetes-client"

    def __init__(self, api_client: Any) -> None:
        self._client = api_client

    def _call(self, verb: str, path: str, query: Query, body: Any, timeout: Any) -> Any:
        """The urllib3 response of an answered request (status < 400); raises HttpError."""
        try:
            serialized = self._client.param_serialize(
                verb,
                path,
                query_params=list(query),
                header_params={"Accept": "application/json", "Content-Type": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
            )
            answer = self._client.call_api(*serialized, _request_timeout=timeout)
        except Exception as exc:  # urllib3's connection, timeout and protocol errors
            raise HttpError(f"{type(exc).__name__}: {exc}") from None
        response = answer.response
        if answer.status >= 400:
            raise HttpError(str(answer.reason), answer.status, bytes(response.data or b""))
        return response

    def request(
        self, verb: str, path: str, query: Query, body: Mapping[str, Any] | None, timeout: float
    ) -> bytes:
        response = self._call(verb, path, query, body, timeout)
        try:
            data: bytes = response.data
        except Exception as exc:  # the answer broke off
            raise HttpError(f"{type(exc).__name__}: {exc}") from None
        return data

    def stream(self, path: str, query: Query, timeout: tuple[float, float]) -> Stream:
        return _ClientStream(self._call("GET", path, query, None, timeout))

    def cut(self, threads: Collection[threading.Thread]) -> None:
        """urllib3 does not say which connection a thread waits on: a request in flight ends at
        its timeout (``--api-timeout``); the caller's later calls are refused (`KubeApi`)."""
