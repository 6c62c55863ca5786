"""How every zsynth process reaches Redis: a plain URL, or a set of Sentinels that name the current master.

``ZSYNTH_REDIS_URL`` takes what redis-py takes (``redis://``, ``rediss://``, ``unix://``) and also

    redis+sentinel://[[user]:password@]host:port[,host:port...]/service_name[/db][?sentinel_password=...]
    rediss+sentinel://...   (TLS to the sentinels and to the data nodes)

The credentials in the URL are the data nodes' (the master's); sentinels that have a password of their own take it
from the ``sentinel_password`` query parameter (and ``sentinel_username``). A host without a port means Sentinel's
26379. The clients come from redis-py's own Sentinel support: every new connection asks the sentinels for the
master, so pools, pub/sub subscriptions and blocking commands follow a promotion when they reconnect, and a
connection to a master that was demoted fails (redis-py turns its READONLY reply into a connection error) and is
opened again on the new master.

:class:`MasterWatch` asks the sentinels once a second which master they name, so a process notices a promotion
even while idle: it counts them and says which master it uses (``/readyz``, and the front's metrics through a
callback). Reconnecting needs no callback: a promotion drops every connection to the old master, and each
reconnects through the sentinels (the front's reply listener then audits its open jobs, a voice-library follower
compares with its bucket).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import parse_qs, unquote

import redis
import redis.sentinel
from redis.asyncio import BlockingConnectionPool
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

SENTINEL_SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}
PLAIN_SCHEMES = ("redis://", "rediss://", "unix://")
DEFAULT_SENTINEL_PORT = 26379
#: How long one question to one sentinel may take (a dead sentinel is skipped for the next).
SENTINEL_TIMEOUT_S = 1.0
#: TCP keepalive on every connection to a Redis server: a master whose host died without closing its sockets is
#: noticed within about 5 + 3 x 2 = 11 s, even by a connection blocked in BLMOVE, XREAD or a pub/sub read (those
#: have no read timeout of their own, and the kernel's default keepalive would wait two hours).
KEEPALIVE: dict[str, Any] = {
    "socket_keepalive": True,
    "socket_keepalive_options": {socket.TCP_KEEPIDLE: 5, socket.TCP_KEEPINTVL: 2, socket.TCP_KEEPCNT: 3},
}


def _tcp(url: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the keepalive settings added for a TCP URL (a Unix socket has no keepalive)."""
    return kwargs if url.startswith("unix://") else {**KEEPALIVE, **kwargs}


@dataclass(frozen=True, slots=True)
class SentinelTarget:
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    tls: bool = False

    def data_kwargs(self) -> dict[str, Any]:
        """Connection arguments for the master's connections."""
        kwargs: dict[str, Any] = {"db": self.db, "username": self.username, "password": self.password}
        if self.tls:
            kwargs["ssl"] = True
        return kwargs

    def sentinel_kwargs(self) -> dict[str, Any]:
        """Connection arguments for the sentinels' connections (short timeouts: a dead one is skipped)."""
        kwargs: dict[str, Any] = {
            "socket_timeout": SENTINEL_TIMEOUT_S,
            "socket_connect_timeout": SENTINEL_TIMEOUT_S,
            "username": self.sentinel_username,
            "password": self.sentinel_password,
        }
        if self.tls:
            kwargs["ssl"] = True
        return kwargs


def _host_port(item: str) -> tuple[str, int]:
    """``host:port``, ``host`` or ``[v6]:port`` as a pair."""
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise ValueError(f"{item!r} is not host:port")
    elif item.count(":") == 1:
        host, _, port_text = item.partition(":")
    elif ":" in item:
        raise ValueError(f"{item!r}: write an IPv6 sentinel as [address]:port")
    else:
        host, port_text = item, ""
    if not host:
        raise ValueError(f"{item!r} has no host")
    if not port_text:
        return host, DEFAULT_SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{item!r} has no valid port")
    return host, int(port_text)


def parse_sentinel_url(url: str) -> SentinelTarget:
    """Parse a ``redis+sentinel://`` or ``rediss+sentinel://`` URL; ValueError says what is wrong."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SENTINEL_SCHEMES:
        raise ValueError("expected redis+sentinel:// or rediss+sentinel://")
    rest, _, query = rest.partition("?")
    rest = rest.split("#", 1)[0]
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        hosts, userinfo = netloc, ""
    username = password = None
    if userinfo:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    if not hosts:
        raise ValueError("name at least one sentinel: redis+sentinel://host:port[,host:port...]/service")
    sentinels = tuple(_host_port(item.strip()) for item in hosts.split(","))
    parts = [part for part in path.split("/") if part]
    if not parts or len(parts) > 2:
        raise ValueError("the path is /service_name or /service_name/db")
    db = 0
    if len(parts) == 2:
        if not parts[1].isdigit():
            raise ValueError(f"the database {parts[1]!r} is not a number")
        db = int(parts[1])
    options = {key: values[-1] for key, values in parse_qs(query, keep_blank_values=True).items()}
    unknown = set(options) - {"sentinel_password", "sentinel_username"}
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(sorted(unknown))}; known: sentinel_password, sentinel_username")
    return SentinelTarget(
        sentinels=sentinels,
        service=unquote(parts[0]),
        db=db,
        username=username,
        password=password,
        sentinel_username=options.get("sentinel_username") or None,
        sentinel_password=options.get("sentinel_password") or None,
        tls=SENTINEL_SCHEMES[scheme],
    )


def is_sentinel_url(url: str) -> bool:
    """True for a ``redis+sentinel://`` or ``rediss+sentinel://`` URL."""
    return url.split("://", 1)[0] in SENTINEL_SCHEMES


def check_url(url: str) -> str:
    """``url`` if zsynth can use it (for the settings' parser); ValueError otherwise."""
    if is_sentinel_url(url):
        parse_sentinel_url(url)
        return url
    if not url.startswith(PLAIN_SCHEMES):
        raise ValueError("expected a redis://, rediss://, unix://, redis+sentinel:// or rediss+sentinel:// URL")
    return url


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """A Sentinel pool that waits for a free connection (BlockingConnectionPool) instead of raising."""


def _async_sentinel(target: SentinelTarget) -> AsyncSentinel:
    # redis-py leaves its Sentinel classes unannotated.
    return AsyncSentinel(list(target.sentinels), sentinel_kwargs=target.sentinel_kwargs())  # type: ignore[no-untyped-call]


def async_client(url: str, **kwargs: Any) -> AsyncRedis:
    """An asyncio client for ``url`` (``kwargs`` as for ``Redis.from_url``: timeouts, health checks)."""
    kwargs = _tcp(url, kwargs)
    if not is_sentinel_url(url):
        return AsyncRedis.from_url(url, **kwargs)
    target = parse_sentinel_url(url)
    return cast(AsyncRedis, _async_sentinel(target).master_for(target.service, **target.data_kwargs(), **kwargs))


def async_blocking_client(url: str, *, max_connections: int, timeout: float, **kwargs: Any) -> AsyncRedis:
    """An asyncio client whose pool holds at most ``max_connections`` and waits ``timeout`` for a free one."""
    kwargs = _tcp(url, kwargs)
    if not is_sentinel_url(url):
        pool = BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=timeout, **kwargs)
        return AsyncRedis.from_pool(pool)
    target = parse_sentinel_url(url)
    client = _async_sentinel(target).master_for(
        target.service,
        connection_pool_class=_BlockingSentinelPool,
        max_connections=max_connections,
        timeout=timeout,
        **target.data_kwargs(),
        **kwargs,
    )
    return cast(AsyncRedis, client)


def sync_client(url: str, **kwargs: Any) -> redis.Redis:
    """A blocking client for ``url`` (the workers' engine thread, the command line)."""
    kwargs = _tcp(url, kwargs)
    if not is_sentinel_url(url):
        return redis.Redis.from_url(url, **kwargs)
    target = parse_sentinel_url(url)
    # redis-py leaves its blocking Sentinel unannotated.
    sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels), sentinel_kwargs=target.sentinel_kwargs()
    )
    return cast(redis.Redis, sentinel.master_for(target.service, **target.data_kwargs(), **kwargs))  # type: ignore[no-untyped-call]


def plain_address(url: str) -> str:
    """Where a plain URL points, without its credentials: ``host:port`` or the socket's path."""
    if url.startswith("unix://"):
        return url[len("unix://") :].split("?", 1)[0]
    netloc = url.split("://", 1)[1].split("/", 1)[0]
    return netloc.rpartition("@")[2] or "127.0.0.1:6379"


Callback = Callable[[str], Awaitable[None]]


class MasterWatch:
    """Which Redis master this process uses, and how many promotions it has seen.

    With a plain URL the master is that URL's address and :meth:`run` returns at once. With a Sentinel URL,
    :meth:`run` asks the sentinels every ``interval_s`` and, when they name a new master, logs it, counts it and
    awaits every callback (each with the new address; one that fails is logged and the others still run).
    """

    def __init__(self, url: str, interval_s: float = 1.0) -> None:
        self.url = url
        self.interval_s = interval_s
        self.sentinel = is_sentinel_url(url)
        self.master: str | None = None if self.sentinel else plain_address(url)
        self.promotions = 0
        self._callbacks: list[Callback] = []
        self._target = parse_sentinel_url(url) if self.sentinel else None

    @property
    def mode(self) -> str:
        """``sentinel`` or ``direct``."""
        return "sentinel" if self.sentinel else "direct"

    def on_promotion(self, callback: Callback) -> None:
        """Await ``callback(new_master)`` after every promotion seen."""
        self._callbacks.append(callback)

    async def run(self) -> None:
        """Watch until cancelled (returns at once for a plain URL)."""
        if self._target is None:
            return
        sentinel = _async_sentinel(self._target)
        try:
            while True:
                await self.check(sentinel)
                await asyncio.sleep(self.interval_s)
        finally:
            with contextlib.suppress(Exception):
                await sentinel.aclose()

    async def check(self, sentinel: AsyncSentinel) -> None:
        """Ask the sentinels once; handle a change of master."""
        assert self._target is not None
        try:
            host, port = await sentinel.discover_master(self._target.service)
        except (RedisError, OSError) as err:  # no sentinel answers, or none names a healthy master (mid-failover)
            logger.debug("no master named by the sentinels: %s", err)
            return
        address = f"{host}:{port}"
        if address == self.master:
            return
        previous, self.master = self.master, address
        if previous is None:
            logger.info("redis master of %r is %s", self._target.service, address)
            return
        self.promotions += 1
        logger.warning("redis failover: the sentinels promoted %s (was %s)", address, previous)
        for callback in self._callbacks:
            try:
                await callback(address)
            except Exception:
                logger.exception("a callback after the promotion of %s failed", address)
