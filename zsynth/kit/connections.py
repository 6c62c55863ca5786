"""Connections of the three servers: a deadline for request headers, the idle keep-alive timeout and a cap on the
connections one client address may hold.

aiohttp closes a kept-alive connection that stays idle for ``keepalive_timeout`` (its default is an hour), but it
has no deadline for the headers of a request: a client that sends a request line and then one header byte a
minute holds its connection, a file descriptor and a parser for as long as it likes. :class:`GuardedHandler` (an
aiohttp ``RequestHandler``) closes a connection that has not finished its request headers within
ZSYNTH_HEADER_TIMEOUT seconds of connecting, or of starting its next request on a kept-alive connection. With direct
TLS the handshake gets the same deadline (``ssl_handshake_timeout``), and the header deadline starts after it.

Each listening site counts the open connections per client address (an IPv6 address by its /64, which one client
usually holds whole): past ZSYNTH_MAX_CONNECTIONS_PER_ADDRESS a new connection is answered 503 and closed before
anything is read, so one address cannot take every file descriptor of the process.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from yarl import URL

from zsynth.core.config import Settings
from zsynth.core.ratelimit import IPNetwork, address_bucket

logger = logging.getLogger(__name__)

# What a connection past the per-address cap reads before the close. It is written before any request is read, so it
# is plain text (each server's envelope is JSON of its own) and closes the connection.
_BUSY_BODY: Final = b"Too many open connections from this address; close some and try again.\n"
_BUSY: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\n"
    b"Retry-After: 5\r\n"
    b"Connection: close\r\n\r\n" + _BUSY_BODY
)
# At most one warning per this many seconds about refused connections (a flood would otherwise flood the log).
_WARN_EVERY_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The connection settings of one server."""

    header_timeout_s: float
    keepalive_timeout_s: float
    max_per_address: int  # 0: no cap
    uncapped: tuple[IPNetwork, ...] = ()  # the trusted proxies

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionLimits:
        """The limits ZSYNTH_HEADER_TIMEOUT, ZSYNTH_KEEPALIVE_TIMEOUT and ZSYNTH_MAX_CONNECTIONS_PER_ADDRESS set;
        the ZSYNTH_TRUSTED_PROXIES are not capped."""
        return cls(
            settings.http.header_timeout_s,
            settings.http.keepalive_timeout_s,
            settings.http.max_connections_per_address,
            settings.http.trusted_proxies,
        )


def client_bucket(peer: object, trusted: Sequence[IPNetwork] = ()) -> str | None:
    """What a connection from ``peer`` (a socket's peer name) counts under: its IPv4 address, or the /64 of an IPv6
    one (an IPv4-mapped one counts as its IPv4 address); None, never capped, when it is not an IP address or is a
    trusted proxy (ZSYNTH_TRUSTED_PROXIES: a proxy's connections are everyone's, so the proxy caps them itself)."""
    if not isinstance(peer, tuple) or not peer or not isinstance(peer[0], str):
        return None
    return address_bucket(peer[0], trusted)


class AddressCounts:
    """The open connections of one listening site, per client address."""

    def __init__(self, cap: int, uncapped: tuple[IPNetwork, ...] = ()) -> None:
        self.cap = cap
        self.uncapped = uncapped
        self.open: collections.Counter[str] = collections.Counter()
        self._refused = 0
        self._warned_at = -math.inf

    def admit(self, bucket: str | None) -> bool:
        """Count a new connection from ``bucket``; False (and nothing counted) when its address is at the cap."""
        if bucket is None or self.cap == 0:
            return True
        if self.open[bucket] >= self.cap:
            self._refuse(bucket)
            return False
        self.open[bucket] += 1
        return True

    def release(self, bucket: str | None) -> None:
        """Forget one admitted connection from ``bucket``."""
        if bucket is None or self.cap == 0:
            return
        self.open[bucket] -= 1
        if self.open[bucket] <= 0:
            del self.open[bucket]

    def _refuse(self, bucket: str) -> None:
        self._refused += 1
        now = asyncio.get_running_loop().time()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            logger.warning(
                "connection from %s refused: it holds %d open connections (ZSYNTH_MAX_CONNECTIONS_PER_ADDRESS); "
                "%d refused from addresses at the cap since the last such warning",
                bucket,
                self.cap,
                self._refused,
            )
            self._refused = 0


class GuardedHandler(RequestHandler):
    """aiohttp's connection handler with a request-header deadline and the per-address count.

    The deadline hooks read two attributes of aiohttp's ``RequestHandler`` (3.14): ``_request_count``, the requests
    whose headers were parsed, and ``_waiter``, set while the handler waits for the next request.
    tests/test_edge_connections.py checks the behaviour against real connections.
    """

    __slots__ = ("_counts", "_bucket", "_admitted", "_header_timeout", "_deadline", "_parsed")

    def __init__(self, manager: web.Server, *, counts: AddressCounts, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._counts = counts
        self._bucket: str | None = None
        self._admitted = False
        self._header_timeout = header_timeout_s
        self._deadline: asyncio.TimerHandle | None = None
        self._parsed = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Count the connection, or answer 503 and close it when its address is at the cap; start the deadline."""
        self._bucket = client_bucket(transport.get_extra_info("peername"), self._counts.uncapped)
        if not self._counts.admit(self._bucket):
            # aiohttp never sees this connection: nothing is parsed or scheduled for it.
            stream = cast(asyncio.Transport, transport)  # a server's transports are streams (uvloop's subclass none)
            stream.write(_BUSY)
            stream.close()
            return
        self._admitted = True
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        """Parse as aiohttp does; stop the deadline once headers are complete, start it when a new request begins."""
        if not self._admitted:
            return
        waiting = self._waiter is not None and not self._waiter.done()  # between requests (not in a handler)
        super().data_received(data)
        if self._request_count != self._parsed:
            self._parsed = self._request_count
            self._disarm()
        elif data and waiting and self._deadline is None:
            self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        """Stop the deadline and uncount the connection."""
        self._disarm()
        if self._admitted:
            self._admitted = False
            self._counts.release(self._bucket)
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._deadline = self._loop.call_later(self._header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self._request_count == self._parsed and self.transport is not None:
            logger.debug("connection from %s closed: no complete request headers in time", self._bucket)
            # abort, not close: nothing is owed to a client that never finished asking, and a TLS close would wait
            # for its close_notify.
            self.transport.abort()


class GuardedSite(web.BaseSite):
    """A TCP site (as aiohttp's ``TCPSite``) whose connections are :class:`GuardedHandler`\\ s."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        limits: ConnectionLimits,
        handler_options: dict[str, Any],
        *,
        ssl_context: Any = None,
        reuse_port: bool = False,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._limits = limits
        self._handler_options = handler_options
        self._reuse_port = reuse_port
        self.counts = AddressCounts(limits.max_per_address, limits.uncapped)

    @property
    def name(self) -> str:
        """The site's URL."""
        return str(URL.build(scheme="https" if self._ssl_context else "http", host=self._host, port=self._port))

    async def start(self) -> None:
        """Listen on host:port; every accepted connection gets a :class:`GuardedHandler`."""
        await super().start()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()

        def handler() -> GuardedHandler:
            return GuardedHandler(
                server,
                loop=loop,
                counts=self.counts,
                header_timeout_s=self._limits.header_timeout_s,
                **self._handler_options,
            )

        self._server = await loop.create_server(
            handler,
            self._host,
            self._port,
            ssl=self._ssl_context,
            ssl_handshake_timeout=self._limits.header_timeout_s if self._ssl_context else None,
            backlog=self._backlog,
            reuse_address=None,
            reuse_port=self._reuse_port,
        )


def handler_options(limits: ConnectionLimits) -> dict[str, Any]:
    """The keyword arguments of every connection handler (and of the runner, so the two agree)."""
    return {"keepalive_timeout": limits.keepalive_timeout_s, "access_log": None}
