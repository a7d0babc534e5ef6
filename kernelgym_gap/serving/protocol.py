"""How both servers run their app: uvicorn (h11) with timeouts and caps, so that a careless or hostile
client cannot hold the server open.

- HEADER_TIMEOUT_S: a connection must finish sending a request's headers within this many seconds of
  connecting (or of starting the next request on a kept-alive connection); otherwise it is answered 408 and
  closed. uvicorn alone has no such timeout: a connection that never finishes its headers stays open.
- KEEP_ALIVE_S: an idle kept-alive connection is closed after this many seconds (uvicorn's timeout_keep_alive).
- MAX_CONNECTIONS: connections open at once in all; one more is answered 503 and closed at once. uvicorn's
  limit_concurrency (the same number) answers 503 to requests beyond it.
- MAX_PER_CLIENT: connections open at once from one client address; one more from it is answered 503 and
  closed, so that one client's idle sockets never use up the whole server (the others still connect).
- HEALTH_RESERVE: connections beyond MAX_CONNECTIONS that may only ask for a health path (HEALTH_PATHS;
  anything else on them is answered 503), so that a server whose connections are all taken, by idle
  clients spread over many addresses, still answers its monitor (issue 32, L4).
- MAX_HEADER_BYTES: h11's bound on an incomplete request head (a larger head is answered 400).
- Bodies: limits.BodyLimit (the app's body limit and BODY_TIMEOUT_S for the whole body).
"""
from __future__ import annotations

import asyncio
import collections

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5
MAX_CONNECTIONS = 256
MAX_PER_CLIENT = 64
HEALTH_RESERVE = 16
HEALTH_PATHS = frozenset({"/api/health", "/health"})
MAX_HEADER_BYTES = 16 * 1024
BODY_TIMEOUT_S = 30.0

_408 = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\ncontent-length: 30\r\n"
        b"connection: close\r\n\r\nrequest headers took too long\n")
_503 = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 25\r\n"
        b"retry-after: 1\r\nconnection: close\r\n\r\ntoo many open connections")


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a request-header deadline and hard caps on open connections, in all and
    per client address. `per_client` is the count of open connections per address, one dict per server
    (guarded_protocol makes a subclass per server)."""

    header_timeout_s = HEADER_TIMEOUT_S
    max_connections = MAX_CONNECTIONS
    max_per_client = MAX_PER_CLIENT
    per_client: collections.Counter = collections.Counter()
    health_reserve = HEALTH_RESERVE

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        peer = transport.get_extra_info("peername")
        self._peer = peer[0] if isinstance(peer, (tuple, list)) and peer else str(peer)
        self.per_client[self._peer] += 1
        if (len(self.connections) > self.max_connections + self.health_reserve
                or self.per_client[self._peer] > self.max_per_client):
            transport.write(_503)
            transport.close()
            return
        if len(self.connections) > self.max_connections:   # a reserved connection: health only
            self.app = _health_only(self.app)
        self._arm_header_timer()

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():   # headers still incomplete
            self.transport.write(_408)
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:        # (the start of) a request head: its deadline runs
            self._arm_header_timer()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:    # the head is complete
            self._disarm_header_timer()

    def connection_lost(self, exc) -> None:
        self._disarm_header_timer()
        peer = getattr(self, "_peer", None)
        if peer is not None:
            self.per_client[peer] -= 1
            if self.per_client[peer] <= 0:
                del self.per_client[peer]
            self._peer = None
        super().connection_lost(exc)


def _health_only(app):
    """The app for a connection past MAX_CONNECTIONS (HEALTH_RESERVE): a health path, or 503."""
    async def guarded(scope, receive, send):
        if scope.get("type") != "http" or scope.get("path") in HEALTH_PATHS:
            return await app(scope, receive, send)
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"text/plain"), (b"retry-after", b"1"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": b"too many open connections"})
    return guarded


def guarded_protocol(header_timeout_s: float = HEADER_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS,
                     max_per_client: int = MAX_PER_CLIENT):
    return type("GuardedH11Protocol", (GuardedH11Protocol,),
                {"header_timeout_s": header_timeout_s, "max_connections": max_connections,
                 "max_per_client": max_per_client, "per_client": collections.Counter()})


def server_config(app, host: str = "127.0.0.1", port: int = 8000, *, header_timeout_s: float = HEADER_TIMEOUT_S,
                  max_connections: int = MAX_CONNECTIONS, max_per_client: int = MAX_PER_CLIENT,
                  log_level: str = "warning") -> uvicorn.Config:
    """The uvicorn settings both servers run with (tests and scripts use them too)."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level,
                          http=guarded_protocol(header_timeout_s, max_connections, max_per_client),
                          # uvicorn answers 503 past limit_concurrency: the health reserve lies below it
                          timeout_keep_alive=KEEP_ALIVE_S, limit_concurrency=max_connections + HEALTH_RESERVE,
                          h11_max_incomplete_event_size=MAX_HEADER_BYTES, ws="none", lifespan="off",
                          timeout_graceful_shutdown=5)


def serve(app, host: str = "127.0.0.1", port: int = 8000, **kw) -> None:
    uvicorn.Server(server_config(app, host, port, **kw)).run()
