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

**Reconnects that lose no command.** Every client built here (the fronts' pool, the workers' clients, each voice
library's) behaves the same way when Redis restarts or fails over:

* *A pooled connection is checked when it is taken.* One the server closed while it sat idle in the pool (its
  socket shows the peer's FIN or reset, or holds bytes nobody asked for) is opened afresh before anything is
  written to it, so the command goes out on a live connection. redis-py 8 skips its own such check when the pool's
  maintenance notifications are on ``auto``, its default; that sent the first command after a restart through a
  dead socket (issue 48, A1: the first job after a restart answered 503). The check is a ``poll`` of the socket
  plus a look at what the event loop already read, so it needs no round trip.
* *A command whose connection could not be opened* (refused, or reset during the handshake) was not sent, so it
  is sent once more on a fresh connection, whatever it is. A connect that timed out is not repeated: a front must
  answer 503 quickly while Redis is unreachable.
* *A read-only command that lost its connection after it was sent* (:data:`SAFE_TO_REPEAT`) is sent once more on a
  fresh connection: repeating it changes nothing.
* *A write that lost its connection after it was sent is never repeated*, here or by redis-py (its clients here
  keep redis-py's default of no retries): Redis may have run it before the connection dropped, and a job pushed
  twice would be spoken twice. The caller sees the error (a front answers 503 ``system_busy`` with Retry-After).
  redis-py's own ``Retry`` cannot make this distinction: it repeats any command that failed with a connection
  error, whether or not the write reached the server. Pipelines and transactions are not repeated either; they
  get the check on take like every command.
* Blocking reads (``XREAD BLOCK``, ``BLMOVE``) are not repeated: a blocked command that loses its connection is
  how its loop learns Redis went away, and each loop has its own backoff and catch-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import parse_qs, unquote

import redis
import redis.sentinel
from redis.asyncio import BlockingConnectionPool, ConnectionPool
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
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


#: Read-only commands that are sent once more on a fresh connection when theirs was lost after they were sent:
#: running one twice changes nothing. Writes are never in this set (a write may have run before the connection
#: dropped), nor are blocking reads (their loops treat a lost connection as news, see the module's docstring).
SAFE_TO_REPEAT: frozenset[str] = frozenset(
    {
        "PING", "ECHO", "TIME", "INFO", "DBSIZE", "TYPE", "EXISTS", "TTL", "PTTL", "SCAN", "KEYS",
        "GET", "MGET", "STRLEN", "GETRANGE",
        "HGET", "HMGET", "HGETALL", "HEXISTS", "HLEN", "HKEYS", "HVALS", "HSCAN",
        "LLEN", "LRANGE", "LINDEX", "LPOS",
        "SMEMBERS", "SISMEMBER", "SMISMEMBER", "SCARD", "SSCAN",
        "ZCARD", "ZSCORE", "ZMSCORE", "ZRANGE", "ZRANGEBYSCORE", "ZREVRANGE", "ZRANK", "ZCOUNT", "ZSCAN",
        "XLEN", "XRANGE", "XREVRANGE",
    }
)  # fmt: skip


class CommandNotSent(RedisConnectionError):
    """The connection for a command could not be opened (refused, or reset during the handshake): nothing of the
    command reached Redis, so sending it again cannot run it twice."""


class NoFreeConnection(RedisConnectionError):
    """Every connection of a blocking pool stayed busy for its whole timeout (never repeated: it would wait again)."""


_PEER_GONE = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)  # POLLRDHUP: Linux only


def _socket_closed(connection: AbstractConnection) -> bool:
    """True when the kernel says the server closed or reset this connection's socket.

    Asked of the socket itself, not of the event loop: a FIN the loop has not read yet is seen too. Only a closed or
    reset peer counts, never readable data (a TLS record such as a session ticket can sit there on a live socket).
    """
    writer = getattr(connection, "_writer", None)  # redis-py keeps the stream writer private
    transport = getattr(writer, "transport", None)
    if transport is None:
        return False
    if transport.is_closing():
        return True
    sock = transport.get_extra_info("socket")
    fileno = sock.fileno() if sock is not None else -1
    if fileno < 0:
        return sock is not None  # a socket object whose descriptor is already closed
    poller = select.poll()
    poller.register(fileno, _PEER_GONE)
    return bool(poller.poll(0))


async def _unfit(connection: AbstractConnection) -> bool:
    """True when an idle pooled connection must not carry the next command: the server closed it, or it holds bytes
    nobody asked for (an idle connection here never does: the clients speak RESP2, so no pushes arrive unasked)."""
    # can_read: redis-py 8; can_read_destructive before it (same meaning, deprecated in 8).
    readable = getattr(connection, "can_read", None) or connection.can_read_destructive
    try:
        if await readable():  # bytes the loop read already, or the EOF it saw
            return True
    except (RedisConnectionError, OSError):
        return True
    return _socket_closed(connection)


class _CheckedPool(ConnectionPool):
    """Checks a pooled connection when it is taken, and tells why a take failed (see the module's docstring).

    The plain asyncio pool, and a mixin for the others below (its methods run before those of the pool classes
    named after it).
    """

    async def ensure_connection(self, connection: AbstractConnection) -> None:
        """Connect ``connection`` if needed; reopen it when the server closed it while it sat in the pool."""
        try:
            await super().ensure_connection(connection)
            if await _unfit(connection):
                logger.debug("redis: a pooled connection was closed by the server; opening it again before use")
                await connection.disconnect()
                await connection.connect()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        except RedisConnectionError as err:
            if type(err) is not RedisConnectionError:  # its subclasses (authentication, loading...) stay as they are
                raise
            raise CommandNotSent(*err.args) from err

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        """A checked connection; CommandNotSent when it could not be opened, NoFreeConnection when none was free."""
        try:
            connection = await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except RedisConnectionError as err:
            if type(err) is not RedisConnectionError:
                raise
            raise NoFreeConnection(*err.args) from err  # BlockingConnectionPool's "No connection available."
        return cast(AbstractConnection, connection)


class _BlockingPool(_CheckedPool, BlockingConnectionPool):
    """The blocking asyncio pool (waits for a free connection), checked on take."""


class _SentinelPool(_CheckedPool, SentinelConnectionPool):
    """The Sentinel asyncio pool, checked on take."""


class _BlockingSentinelPool(_CheckedPool, SentinelConnectionPool, BlockingConnectionPool):
    """A Sentinel pool that waits for a free connection (BlockingConnectionPool) instead of raising, checked on take."""


def _command_name(args: tuple[Any, ...]) -> str:
    name = args[0] if args else ""
    return (name.decode() if isinstance(name, bytes) else str(name)).upper()


def may_repeat(args: tuple[Any, ...], err: RedisConnectionError) -> bool:
    """Whether the command ``args`` that failed with ``err`` may be sent once more on a fresh connection: it was
    never sent (its connection could not be opened), or it is read-only and lost its connection."""
    if isinstance(err, CommandNotSent):
        return True
    return type(err) is RedisConnectionError and _command_name(args) in SAFE_TO_REPEAT


class Client(AsyncRedis):
    """The asyncio client every zsynth process uses: redis-py's, plus the one repeat of :func:`may_repeat`."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        """Run one command; repeat it once on a fresh connection when that cannot run it twice."""
        try:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except RedisConnectionError as err:
            if not may_repeat(args, err):
                raise
            # redis-py closed the failed connection before giving it back: the repeat connects afresh.
            logger.debug("redis: %s repeated once on a fresh connection after %r", _command_name(args), err)
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


class _SyncPool(redis.ConnectionPool):
    """The blocking client's pool: redis-py's own take already reopens a connection the server closed (its check
    polls the socket), so this only tells a command that was never sent from one that was."""

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A checked connection; CommandNotSent when it could not be opened."""
        try:
            return super().get_connection(*args, **kwargs)
        except RedisConnectionError as err:
            if type(err) is not RedisConnectionError:
                raise
            raise CommandNotSent(*err.args) from err


class _SyncSentinelPool(_SyncPool, redis.sentinel.SentinelConnectionPool):
    """The blocking Sentinel pool, as :class:`_SyncPool`."""


class SyncClient(redis.Redis):
    """The blocking client (the workers' engine thread, the command line), with the one repeat of :func:`may_repeat`."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        """Run one command; repeat it once on a fresh connection when that cannot run it twice."""
        try:
            return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except RedisConnectionError as err:
            if not may_repeat(args, err):
                raise
            logger.debug("redis: %s repeated once on a fresh connection after %r", _command_name(args), err)
            return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


def _async_sentinel(target: SentinelTarget) -> AsyncSentinel:
    # redis-py leaves its Sentinel classes unannotated.
    return AsyncSentinel(list(target.sentinels), sentinel_kwargs=target.sentinel_kwargs())  # type: ignore[no-untyped-call]


def async_client(url: str, **kwargs: Any) -> AsyncRedis:
    """An asyncio client for ``url`` (``kwargs`` as for ``Redis.from_url``: timeouts, health checks)."""
    kwargs = _tcp(url, kwargs)
    if not is_sentinel_url(url):
        return Client.from_pool(_CheckedPool.from_url(url, **kwargs))
    target = parse_sentinel_url(url)
    client = _async_sentinel(target).master_for(
        target.service,
        redis_class=Client,
        connection_pool_class=_SentinelPool,
        **target.data_kwargs(),
        **kwargs,
    )
    return cast(AsyncRedis, client)


def async_blocking_client(url: str, *, max_connections: int, timeout: float, **kwargs: Any) -> AsyncRedis:
    """An asyncio client whose pool holds at most ``max_connections`` and waits ``timeout`` for a free one."""
    kwargs = _tcp(url, kwargs)
    if not is_sentinel_url(url):
        pool = _BlockingPool.from_url(url, max_connections=max_connections, timeout=timeout, **kwargs)
        return Client.from_pool(pool)
    target = parse_sentinel_url(url)
    client = _async_sentinel(target).master_for(
        target.service,
        redis_class=Client,
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
        return SyncClient.from_pool(_SyncPool.from_url(url, **kwargs))
    target = parse_sentinel_url(url)
    # redis-py leaves its blocking Sentinel unannotated.
    sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels), sentinel_kwargs=target.sentinel_kwargs()
    )
    client = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.service,
        redis_class=SyncClient,
        connection_pool_class=_SyncSentinelPool,
        **target.data_kwargs(),
        **kwargs,
    )
    return cast(redis.Redis, client)


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
