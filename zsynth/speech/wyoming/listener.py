"""The Wyoming listener of the speech front: its TCP server, who may connect, and the zeroconf announcement.

Wyoming carries no credentials, so access is by address: the listener answers only on the address it is given
(ZSYNTH_WYOMING_URI, warned about at start when it is not loopback), closes at once a client outside
ZSYNTH_WYOMING_ALLOW when that list is set, lets one client address (an IPv6 /64) hold at most
ZSYNTH_WYOMING_MAX_CONNECTIONS_PER_ADDRESS connections and all clients together ZSYNTH_WYOMING_MAX_CONNECTIONS (a
client may hold many addresses: loopback's /8, an IPv6 block). A connection past either cap gets an ``error`` event
(``too_many_connections``) and a close. Refused connections are logged at most once a minute (with how many there
were), so a flood of them cannot flood the log.

With ZSYNTH_WYOMING_ZEROCONF=name it announces ``<name>._wyoming._tcp.local.`` over mDNS (python-zeroconf, the
``wyoming`` extra), as wyoming-piper does, so Home Assistant offers to add it. The announcement names the listener's
IPv4 address; on a wildcard address (0.0.0.0) it names the address this box reaches the LAN from.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import logging
import math
import socket
import time
from collections.abc import AsyncIterator
from typing import Any, Final

from aiohttp import web

from zsynth.core.codes import ApiCode
from zsynth.core.ratelimit import address_bucket
from zsynth.services.keys import SETTINGS
from zsynth.speech.wyoming.events import MAX_HEADER_BYTES, encode_event
from zsynth.speech.wyoming.session import Session

logger = logging.getLogger(__name__)

SERVICE_TYPE: Final = "_wyoming._tcp.local."
# Where a UDP socket is "connected" to learn which local address reaches the LAN (no packet is sent).
_MDNS_GROUP: Final = "224.0.0.251"
# At most one log line per this many seconds about refused connections.
_REFUSALS_LOGGED_EVERY_S: Final = 60.0


def is_loopback(host: str) -> bool:
    """``host`` is a loopback address or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def service_info(name: str, address: str, port: int) -> Any:
    """The zeroconf record that announces the listener as ``<name>._wyoming._tcp.local.`` at ``address:port``."""
    from zeroconf.asyncio import AsyncServiceInfo  # the optional `wyoming` extra, needed only when announcing

    return AsyncServiceInfo(
        SERVICE_TYPE, f"{name}.{SERVICE_TYPE}", addresses=[socket.inet_aton(address)], port=port, server=None
    )


def lan_address(host: str) -> str:
    """The IPv4 address to announce for a listener on ``host``."""
    try:
        if ipaddress.ip_address(host).version == 4 and not ipaddress.ip_address(host).is_unspecified:
            return host
    except ValueError:
        return socket.gethostbyname(host)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((_MDNS_GROUP, 1))
        return str(probe.getsockname()[0])


class Listener:
    """The TCP server and its open connections."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.settings = app[SETTINGS]
        self._server: asyncio.Server | None = None
        self._counts: collections.Counter[str] = collections.Counter()
        self._open = 0  # connections admitted and not yet ended, from every address
        self._refused = 0  # connections refused since the last log line about them
        self._refusal_logged_at = -math.inf
        self._sessions: set[asyncio.Task[Any]] = set()
        self._zeroconf: Any = None
        self._record: Any = None

    @property
    def port(self) -> int:
        """The port it listens on (the one asked for, or the one the system chose for port 0)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def open_connections(self) -> int:
        """The connections it serves now (admitted and not yet ended), from every address."""
        return self._open

    async def start(self) -> None:
        """Listen; announce over zeroconf when asked to."""
        assert self.settings.wyoming.uri is not None
        host, port = self.settings.wyoming.uri
        self._server = await asyncio.start_server(self._accept, host, port, limit=MAX_HEADER_BYTES)
        logger.info("wyoming listening on tcp://%s:%d", host if ":" not in host else f"[{host}]", self.port)
        if not is_loopback(host):
            logger.warning(
                "wyoming: listening on %s, beyond this box: Wyoming has no credentials, so anyone who can reach "
                "the port may use it (set ZSYNTH_WYOMING_ALLOW to the client networks, e.g. Home Assistant's address)",
                host,
            )
        if self.settings.wyoming.zeroconf:
            await self._announce(self.settings.wyoming.zeroconf, host)

    async def _announce(self, name: str, host: str) -> None:
        from zeroconf.asyncio import AsyncZeroconf

        if is_loopback(host):
            logger.warning("wyoming: announcing a loopback listener over zeroconf: other hosts cannot reach it")
        address = lan_address(host)
        record = service_info(name, address, self.port)
        self._zeroconf = AsyncZeroconf()
        await self._zeroconf.async_register_service(record)
        self._record = record
        logger.info("wyoming: announced as %s.%s at %s:%d", name, SERVICE_TYPE, address, self.port)

    async def close(self) -> None:
        """Stop listening, end every connection (their jobs are cancelled) and withdraw the announcement."""
        if self._zeroconf is not None:
            with contextlib.suppress(Exception):
                await self._zeroconf.async_unregister_service(self._record)
            await self._zeroconf.async_close()
        if self._server is not None:
            self._server.close()
        for task in list(self._sessions):
            task.cancel()
        await asyncio.gather(*self._sessions, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = peer[0] if isinstance(peer, tuple) and peer and isinstance(peer[0], str) else ""
        if not self._allowed(address):
            writer.transport.abort()
            self._log_refusal(f"{address} is not in ZSYNTH_WYOMING_ALLOW")
            return
        bucket = address_bucket(address) or address
        per_address, total = self.settings.wyoming.max_connections_per_address, self.settings.wyoming.max_connections
        if self._counts[bucket] >= per_address:
            self._refuse(
                writer,
                f"Too many open connections from this address (at most {per_address}); close some and try again.",
                f"{bucket} already holds {per_address} (ZSYNTH_WYOMING_MAX_CONNECTIONS_PER_ADDRESS)",
            )
            return
        if self._open >= total:
            self._refuse(
                writer,
                f"The server holds as many connections as it takes (at most {total}); try again later.",
                f"{total} are open (ZSYNTH_WYOMING_MAX_CONNECTIONS); this one from {bucket}",
            )
            return
        self._counts[bucket] += 1
        self._open += 1
        task = asyncio.current_task()
        if task is not None:
            self._sessions.add(task)
        try:
            await Session(self.app, reader, writer).run()
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        except Exception:  # a defect: its traceback goes to the log, never to the client
            logger.exception("wyoming: connection from %s failed", address)
            writer.transport.abort()
        finally:
            self._open -= 1
            self._counts[bucket] -= 1
            if self._counts[bucket] <= 0:
                del self._counts[bucket]
            if task is not None:
                self._sessions.discard(task)

    def _refuse(self, writer: asyncio.StreamWriter, text: str, why: str) -> None:
        """Answer a connection past a cap with an ``error`` event and close it."""
        writer.write(encode_event("error", {"text": text, "code": ApiCode.TOO_MANY_CONNECTIONS}))
        writer.close()
        self._log_refusal(why)

    def _log_refusal(self, why: str) -> None:
        """One log line about a refused connection, at most once a minute (anyone who can reach the port can make
        refusals, as fast as it can connect)."""
        self._refused += 1
        now = time.monotonic()
        if now - self._refusal_logged_at >= _REFUSALS_LOGGED_EVERY_S:
            logger.warning("wyoming: connection refused: %s; %d refused since the last such line", why, self._refused)
            self._refusal_logged_at = now
            self._refused = 0

    def _allowed(self, address: str) -> bool:
        allow = self.settings.wyoming.allow
        if not allow:
            return True
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in net for net in allow)


LISTENER: Final = web.AppKey("wyoming_listener", Listener)


async def wyoming_context(app: web.Application) -> AsyncIterator[None]:
    """The listener's life inside the speech front (registered after the voices and the dispatcher it needs)."""
    listener = Listener(app)
    await listener.start()
    app[LISTENER] = listener
    try:
        yield
    finally:
        await listener.close()
