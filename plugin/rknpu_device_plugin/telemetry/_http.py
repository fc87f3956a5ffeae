"""The metrics HTTP endpoint: a registry at /metrics and /healthz; stops without waiting on clients."""

from __future__ import annotations

import logging
import selectors
import socket
import socketserver
import threading
from collections.abc import Callable, Sequence
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import make_wsgi_app

from rknnlaunch import UsageError
from rknnlaunch.npu import HostRoot, NpuInfo

from ._collector import NpuCollector, build_registry
from ._podresources import PodResourcesClient
from ._sink import PluginMetrics

log = logging.getLogger(__name__)

# A scrape client that stalls must not pin a server thread for long, nor stop(), which joins
# request threads: the plugin must exit within 2 s of SIGTERM. Prometheus sends its request at
# once and a page fits the socket buffer, so 1 s per socket operation is ample.
_CLIENT_TIMEOUT_SECONDS = 1.0


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"``, ``":9101"`` (all interfaces), ``"[::1]:9101"`` or ``"9101"`` -> (host, port)."""
    text = address.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port_text.isdigit() or int(port_text) > 65535:
        raise UsageError(
            f"metrics address {address!r} is not host:port",
            "use e.g. ':9101' (all interfaces), '127.0.0.1:9101' or '[::]:9101'",
        )
    return host or "0.0.0.0", int(port_text)


class _QuietHandler(WSGIRequestHandler):
    """Serves scrapes without logging each one; gives up on clients that stall."""

    timeout = _CLIENT_TIMEOUT_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _MetricsHTTPServer(ThreadingMixIn, WSGIServer):
    # Non-daemon request threads that server_close() joins: stop() leaves no thread behind.
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind asks DNS for our FQDN; a node with broken DNS must still serve.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()


class _MetricsHTTPServer6(_MetricsHTTPServer):
    address_family = socket.AF_INET6


def _wsgi_app(registry: CollectorRegistry) -> Callable[..., Any]:
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n"]
        if path in ("/", "/metrics"):
            return metrics_app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: metrics are at /metrics\n"]

    return app


class MetricsServer:
    """A running metrics endpoint. Calling it (or `stop`) shuts it down; `port` is the bound port."""

    def __init__(
        self, address: str, registry: CollectorRegistry, on_stop: Sequence[Callable[[], None]] = ()
    ) -> None:
        host, port = parse_address(address)
        server_class = _MetricsHTTPServer6 if ":" in host else _MetricsHTTPServer
        try:
            self._httpd = server_class((host, port), _QuietHandler)
        except OSError as exc:
            raise UsageError(
                f"cannot serve metrics on {address!r}: {exc.strerror or exc}",
                "pick a free port (or another address) for the metrics endpoint",
            ) from exc
        self._httpd.set_app(_wsgi_app(registry))
        self.registry = registry
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._on_stop = list(on_stop)
        self._stop_lock = threading.Lock()
        self._stopped = False
        # stop() writes to this pair to wake the serving thread, which otherwise sleeps in select()
        # with no timeout: an idle endpoint costs no CPU and stop() returns at once.
        self._wake_read, self._wake_write = socket.socketpair()
        self._thread = threading.Thread(
            target=self._serve,
            name=f"rknpu-metrics:{self.port}",
            daemon=True,
        )
        self._thread.start()
        log.info("serving metrics on %s", self.url)

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._httpd, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._wake_read in ready:
                    return
                try:
                    # The listening socket is readable: accept and hand the client to a thread.
                    self._httpd.handle_request()
                except Exception:  # one broken client must not end the endpoint
                    log.exception("serving a metrics request failed")

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host == "0.0.0.0" else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving, wait for in-flight scrapes and the server thread, close the kubelet channel."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        self._wake_write.send(b"x")
        self._thread.join()
        self._httpd.server_close()  # joins in-flight scrape threads
        self._wake_read.close()
        self._wake_write.close()
        for close in self._on_stop:
            close()

    def __call__(self) -> None:
        self.stop()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_metrics_server(
    address: str,
    metrics: PluginMetrics,
    host: HostRoot,
    current_info: Callable[[], NpuInfo | None],
    pod_resources_socket: str,
    resource_name: str,
) -> MetricsServer:
    """Serve the plugin's and the NPU's metrics on ``address`` ("host:port"; ":9101" = all interfaces).

    Returns the running server; calling it stops it (the plugin treats it as ``Callable[[], None]``).
    An empty ``pod_resources_socket`` turns pod attribution off. Raises `UsageError` when the
    address is malformed or cannot be bound.
    """
    client = PodResourcesClient(pod_resources_socket, resource_name) if pod_resources_socket else None
    registry = build_registry(NpuCollector(host, current_info, client), metrics)
    try:
        return MetricsServer(address, registry, on_stop=[client.close] if client is not None else [])
    except BaseException:
        if client is not None:
            client.close()
        raise
