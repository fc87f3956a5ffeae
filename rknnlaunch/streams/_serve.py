"""The read-only HTTP servers of a watch (live view, metrics): ``host:port`` parsing, binding before
any decoding starts (a port in use is one line naming the flag), GET-only handlers, a serving thread,
and the start/close lifecycle the observers that serve share (`PageServer`).

Standard library only (`http.server.ThreadingHTTPServer`)."""

from __future__ import annotations

import errno
import http.server
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._errors import UsageError

if TYPE_CHECKING:  # the servers' kit parses its addresses here: no numpy at run time
    from ._results import StreamStats

CLIENT_TIMEOUT_SECONDS = 5.0
"""Each socket operation of a client; a client that stalls frees its thread after this."""

Page = tuple[int, str, bytes]
"""(HTTP status, Content-Type, body)."""
Route = Callable[[str], Page | None]
"""A server's pages: the request path (query stripped) -> the page, or None (404)."""


class WatchedStreams(Protocol):
    """What the view and the metrics read of a `Watcher`: the names in order and the figures now."""

    @property
    def names(self) -> list[str]: ...

    def stats(self) -> dict[str, StreamStats]: ...


def parse_address(address: str, flag: str, *, bare_port: bool = False) -> tuple[str, int]:
    """``"host:port"``, ``":8080"`` (all interfaces), ``"[::1]:8080"`` -> (host, port) (port 0: any
    free port, see `HttpServer.port`). A bare port (``"8080"``) is refused (the address says where
    to listen, there is no default) unless ``bare_port``: then it means all interfaces, as the
    servers' ``--metrics-address`` reads it (rknpu_serverkit.parse_address, this one's caller)."""
    text = address.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep and bare_port:
        host, sep, port_text = "", ":", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not port_text.isdigit() or int(port_text) > 65535 or any(c in host for c in "[]/@ "):
        raise UsageError(
            f"{flag} {address!r} is not host:port",
            f"use e.g. {flag} 127.0.0.1:8080 (this machine only) or {flag} :8080 (all interfaces)",
        )
    return host or "0.0.0.0", int(port_text)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    route: Route


class _Handler(http.server.BaseHTTPRequestHandler):
    """GET and HEAD only (anything else: 501 from the base class); no request logging; no banner."""

    server: _Server
    timeout = CLIENT_TIMEOUT_SECONDS
    server_version = "rknnlaunch"
    sys_version = ""

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        page = self.server.route(path)
        status, kind, data = page if page is not None else (404, "text/plain; charset=utf-8", b"not found\n")
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape or a page refresh a second is no log line


class HttpServer:
    """A bound read-only server; `start` serves in a daemon thread, `close` stops it."""

    def __init__(self, address: str, flag: str, route: Route) -> None:
        host, port = parse_address(address, flag)
        server_class: type[_Server] = _Server6 if ":" in host else _Server
        try:
            self._server = server_class((host, port), _Handler, bind_and_activate=True)
        except OSError as exc:
            raise UsageError(*_bind_problem(exc, flag, address, port)) from None
        self._server.route = route
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        )
        self._thread.name = f"rknnlaunch-http{flag}"

    @property
    def port(self) -> int:
        """The port it listens on (the one given, or the one the system chose for port 0 in tests)."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def __enter__(self) -> HttpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_PageServer = TypeVar("_PageServer", bound="PageServer")


class PageServer:
    """An observer that serves pages (`LiveView`, `StreamMetrics`): its constructor binds
    (`_bind`, after its own set-up), `start` (or ``with``) serves in a thread, `close` stops."""

    _server: HttpServer

    def _bind(self, address: str, flag: str) -> None:
        self._server = HttpServer(address, flag, self._route)

    def _route(self, path: str) -> Page | None:
        raise NotImplementedError

    @property
    def port(self) -> int:
        return self._server.port

    def start(self) -> None:
        self._server.start()

    def close(self) -> None:
        self._server.close()

    def __enter__(self: _PageServer) -> _PageServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Server6(_Server):
    # A v6 host ("::", "::1") needs a v6 socket.
    address_family = socket.AF_INET6


def _bind_problem(exc: OSError, flag: str, address: str, port: int) -> tuple[str, str]:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{flag} {address}: port {port} is in use",
            f"give {flag} another port, or stop what listens on {port}",
        )
    if exc.errno == errno.EACCES:
        return (
            f"{flag} {address}: not allowed to listen on port {port}",
            f"give {flag} a port above 1023",
        )
    return (
        f"{flag} {address}: cannot listen there ({exc.strerror or exc})",
        f"give {flag} an address of this machine, e.g. 127.0.0.1:{port} or :{port}",
    )
