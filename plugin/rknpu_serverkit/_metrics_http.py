"""The metrics HTTP endpoint (/metrics, /healthz, /readyz); it stops without waiting on clients."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import make_wsgi_app

from rknnlaunch import UsageError

from ._preflight import parse_address

log = logging.getLogger("rknpu_serverkit.metrics")

# A scrape client must not pin a server thread for long, nor stop(): the plugin must exit within
# 1 s of SIGTERM. Prometheus sends its request at once and a page fits the socket buffer, so a
# whole request (read, answer) gets REQUEST_DEADLINE_SECONDS, each socket operation at most
# _CLIENT_TIMEOUT_SECONDS; a client trickling a byte at a time is cut at the deadline.
REQUEST_DEADLINE_SECONDS = 3.0
_CLIENT_TIMEOUT_SECONDS = 1.0
_STOP_JOIN_SECONDS = 0.5
"""stop() closes every client's socket, then waits at most this long for their threads."""


class _LogStream:
    """A file for wsgiref's error output: what it writes becomes one log record per flush
    (a traceback stays one line, JSON with --log-format json), never raw text on stderr."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def write(self, text: str) -> int:
        self._parts.append(text)
        return len(text)

    def flush(self) -> None:
        text, self._parts = "".join(self._parts).strip(), []
        if text:
            log.error("metrics request failed: %s", text)


class _ServerHandler(ServerHandler):
    server_software = ""  # no "Server: WSGIServer/0.2 CPython/3.x" banner


class _QuietHandler(WSGIRequestHandler):
    """Serves scrapes without logging each one or naming our software; gives up on clients that stall."""

    timeout = _CLIENT_TIMEOUT_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def get_stderr(self) -> Any:
        return _LogStream()

    def send_response(self, code: int, message: str | None = None) -> None:
        # BaseHTTPRequestHandler's error answers (400, 414) would send a Server header too.
        self.log_request(code)
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())

    def handle(self) -> None:
        # WSGIRequestHandler.handle with our ServerHandler (the stdlib names its own).
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.requestline = self.request_version = self.command = ""
            self.send_error(414)
            return
        if not self.parse_request():
            return
        wfile: Any = self.wfile  # a socket file; the stubs want IO[bytes]
        handler = _ServerHandler(self.rfile, wfile, self.get_stderr(), self.get_environ(), multithread=False)
        handler.request_handler = self  # type: ignore[attr-defined]  # wsgiref's back-pointer for logging
        handler.run(self.server.get_app())  # type: ignore[attr-defined]


class _MetricsHTTPServer(WSGIServer):
    """One thread per scrape; each connection has a deadline, and stop() cuts every connection."""

    allow_reuse_address = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # connection -> (deadline, peer); the deadline is None once the connection was cut
        self._clients: dict[socket.socket, tuple[float | None, str]] = {}
        self._client_threads: set[threading.Thread] = set()
        self._clients_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def server_bind(self) -> None:
        # HTTPServer.server_bind asks DNS for our FQDN; a node with broken DNS must still serve.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_client,
            args=(request, client_address),
            name="rknpu-metrics-client",
            daemon=True,
        )
        with self._clients_lock:
            peer = client_address[0] if isinstance(client_address, tuple) else str(client_address)
            self._clients[request] = (time.monotonic() + REQUEST_DEADLINE_SECONDS, str(peer))
            # A thread stays listed until it has ended (not merely finished its request): stop()
            # joins the listed ones, and one still unwinding would outlive stop().
            self._client_threads = {t for t in self._client_threads if t.is_alive()}
            self._client_threads.add(thread)
        thread.start()

    def _serve_client(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            with self._clients_lock:
                self._clients.pop(request, None)
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver would print a traceback to stderr; one log line says it all.
        error = sys.exc_info()[1]
        peer = client_address[0] if isinstance(client_address, tuple) else str(client_address)
        if isinstance(error, OSError):  # timeouts, resets, a connection cut at its deadline
            log.info("metrics client %s went away: %s", peer, error or type(error).__name__)
        else:
            log.error("serving metrics to %s failed: %r", peer, error)

    def next_deadline(self) -> float | None:
        with self._clients_lock:
            return min((d for d, _peer in self._clients.values() if d is not None), default=None)

    def cut_clients(self, now: float | None = None) -> None:
        """Shut down connections past their deadline (all of them when ``now`` is None): a
        blocked read or write in their thread then returns at once."""
        with self._clients_lock:
            late = [
                (sock, peer)
                for sock, (deadline, peer) in self._clients.items()
                if now is None or (deadline is not None and deadline <= now)
            ]
            for sock, peer in late:  # cut once; the client's thread forgets it when it ends
                self._clients[sock] = (None, peer)
        for sock, peer in late:
            if now is not None:
                log.info("metrics client %s cut: no answer within %.0f s", peer, REQUEST_DEADLINE_SECONDS)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def join_clients(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._clients_lock:
            threads = list(self._client_threads)
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0.0))


class _MetricsHTTPServer6(_MetricsHTTPServer):
    address_family = socket.AF_INET6


def _wsgi_app(registry: CollectorRegistry, ready: Callable[[], bool] | None = None) -> Callable[..., Any]:
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n"]
        if path == "/readyz" and ready is not None:
            # A readinessProbe: a rolling update waits for the new pod's 200 before it stops the old.
            if ready():
                start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
                return [b"ready\n"]
            start_response("503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not ready\n"]
        if path in ("/", "/metrics"):
            return metrics_app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: metrics are at /metrics\n"]

    return app


class MetricsServer:
    """A running metrics endpoint. Calling it (or `stop`) shuts it down; `port` is the bound port."""

    def __init__(
        self,
        address: str,
        registry: CollectorRegistry,
        on_stop: Sequence[Callable[[], None]] = (),
        ready: Callable[[], bool] | None = None,
    ) -> None:
        """``ready``: when given, ``/readyz`` answers 200 while it returns True, else 503 (it is
        called on the serving thread for every probe: it must be quick and never block)."""
        host, port = parse_address(address)
        server_class = _MetricsHTTPServer6 if ":" in host else _MetricsHTTPServer
        try:
            self._httpd = server_class((host, port), _QuietHandler)
        except OSError as exc:
            raise UsageError(
                f"cannot serve metrics on {address!r}: {exc.strerror or exc}",
                "pick a free port (or another address) for the metrics endpoint",
            ) from exc
        self._httpd.set_app(_wsgi_app(registry, ready))
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
        httpd = self._httpd
        with selectors.DefaultSelector() as selector:
            selector.register(httpd, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while True:
                # Sleep until a client arrives, stop() is called or a connection's deadline passes.
                deadline = httpd.next_deadline()
                timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                ready = {key.fileobj for key, _ in selector.select(timeout)}
                if self._wake_read in ready:
                    return
                httpd.cut_clients(time.monotonic())
                if httpd in ready:
                    try:
                        # The listening socket is readable: accept and hand the client to a thread.
                        httpd.handle_request()
                    except Exception as exc:  # one broken client must not end the endpoint
                        log.error("accepting a metrics client failed: %r", exc)

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
        self._httpd.server_close()
        # Never wait on a client: cut every connection, then give their threads a moment to end.
        self._httpd.cut_clients()
        self._httpd.join_clients(_STOP_JOIN_SECONDS)
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
