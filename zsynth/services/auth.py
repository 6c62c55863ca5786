"""Authentication core shared by the speech API and the avatar server.

A presented secret is resolved to a :class:`Credential` by an :class:`Authenticator`: static full keys
(``ZSYNTH_API_KEY`` / ``ZSYNTH_API_KEYS``, compared in constant time) and, with ``ZSYNTH_API_KEYS_TABLE``, the
portal keys table (``zsk_live_`` full keys and ``zsk_temp_`` ephemeral tokens). Each server decides from the route's
declared access (:class:`zsynth.kit.endpoints.Access`) whether a credential kind may call it and renders an
:class:`AuthError` in its own envelope. Secrets are never logged; log :func:`fingerprint` instead.

Table look-ups are cached in memory for at most ``cache_ttl_s`` (30 s by default and at most), and never past a
token's expiry, so a revoked key stops working within that time and an expired token at once. A token is checked
against the key that minted it on every use (that look-up is cached too), so a token minted on a front that had not
yet seen its key's revocation stops working within the same time; a token minted by a static key works only where
that key is still configured. Unknown and revoked secrets are cached apart from the known ones, so a flood of made-up
keys cannot evict real entries. Minting reads its key afresh, and puts the new token in the minting front's cache.

Only failures are throttled: a client address that made ``max_failures_per_min`` failed look-ups in the last minute
gets 429 for the next ones, but a key or token that is found always passes, whoever else failed from that address.
What a flood of made-up keys can cost is bounded instead by ``max_concurrent_lookups`` table reads at once, and an
address over its failure limit never waits for one (429 when none is free).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from aiohttp import web

from zsynth.core import workspaces
from zsynth.core.aws import client_config
from zsynth.core.codes import ApiCode, CodedError
from zsynth.core.ratelimit import FailureLimiter, IPNetwork, client_address
from zsynth.services.keystore import KeyRecord, KeyStore, KeyStoreError

if TYPE_CHECKING:
    from zsynth.core.config import Settings

logger = logging.getLogger(__name__)

CredentialKind = Literal["open", "full", "ephemeral"]

#: The scope of short-lived tokens: synthesis (the speech API's ephemeral tokens, ``POST /v1/tokens/ephemeral``, and
#: the avatar server's session tokens, ``POST /v1/streaming.create_token``, both answer ``"scope": "tts"``, as their
#: specs say). Which server a token works on is not its scope but its record's :data:`TokenServer`.
SPEECH_SCOPE: Final = "tts"

#: The server that minted a ``zsk_temp_`` token, kept in its keys-table record: the only server it works on. A token
#: shown to the other one is refused (``insufficient_scope``), whatever its scope says.
TokenServer = Literal["speech", "avatar"]
SPEECH_SERVER: Final = "speech"
AVATAR_SERVER: Final = "avatar"
# Avatar session tokens minted before the record named its server carried this scope instead (read for at most their
# 10 minutes of life after an upgrade).
_LEGACY_AVATAR_SCOPE: Final = "avatar"

TEMP_PREFIX: Final = "zsk_temp_"
LIVE_PREFIX: Final = "zsk_live_"
TTL_DEFAULT: Final = 300
TTL_MIN: Final = 30
TTL_MAX: Final = 600
MAX_CACHE_TTL_S: Final = 30.0
# Longer values are not ours: refuse them before hashing or looking anything up.
_MAX_SECRET_LEN: Final = 512
# Longest wait for a free table look-up slot before the answer is 503 (a table this slow is as good as down).
LOOKUP_WAIT_S: Final = 5.0


class AuthError(CodedError):
    """A credential was refused; ``code`` is one of the spec's auth statuses."""

    def __init__(self, code: str, message: str, http_status: int = 401) -> None:
        super().__init__(code, message)
        self.http_status = http_status


@dataclass(frozen=True, slots=True)
class Credential:
    """Who is calling: an open server, a full key, or a short-lived token (``server``: the one it works on)."""

    kind: CredentialKind
    fingerprint: str = ""  # safe to log: a short hash, never the secret
    expires_at: float | None = None
    scope: str = "all"
    key_hash: str | None = field(default=None, repr=False)  # the table row, for keys from the table
    parent_hash: str | None = field(default=None, repr=False)  # a token's minting key's row (table keys only)
    parent: str | None = None  # the fingerprint of the key that minted a token (static or table)
    server: TokenServer | None = None  # the server that minted a token, from its record (None for keys)
    # The workspace it acts in (zsynth.core.workspaces): a key's own, a token's minting key's; static keys and an open
    # server are in the default one.
    workspace: str = workspaces.DEFAULT

    @property
    def is_full(self) -> bool:
        """Full keys (and an open server) may call every route."""
        return self.kind in ("open", "full")

    @property
    def owner(self) -> str:
        """Whose limits this credential counts against: a token's minting key, else its own fingerprint."""
        return self.parent or self.fingerprint


OPEN: Final = Credential("open", fingerprint="open")


def workspace_of(credential: Credential | None) -> str:
    """The workspace a request acts in: its credential's (a route without one, on a server without keys: default)."""
    return credential.workspace if credential is not None else workspaces.DEFAULT


def secret_hash(secret: str) -> str:
    """The SHA-256 hex digest under which the keys table stores a secret."""
    # surrogateescape: a header with bytes that are not UTF-8 still gets a fingerprint for the log line.
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def fingerprint(secret: str) -> str:
    """A short, non-reversible tag for logs; also the public key id of a table key."""
    return secret_hash(secret)[:12]


#: The JSON schema of a token request's ``ttl_seconds``: an integer, or null for the default.
TTL_SCHEMA: Final = {"anyOf": [{"type": "integer"}, {"type": "null"}]}


def clamp_ttl(value: object) -> int:
    """A token lifetime from a request's ``ttl_seconds``: default 300, clamped to 30-600; ValueError if not whole."""
    if value is None:
        return TTL_DEFAULT
    # bool is an int subclass, and "300" is a string: both are malformed, not numbers.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("ttl_seconds must be an integer number of seconds")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError("ttl_seconds must be an integer number of seconds")
    return max(TTL_MIN, min(TTL_MAX, int(value)))


#: The headers a credential is read from, on every server, before ``Authorization: Bearer <secret>``: ``xi-api-key``
#: (the ElevenLabs SDK's), ``X-Api-Key`` (the avatar spec's) and ``X-Vapi-Secret`` (Vapi's custom voice sends its
#: server secret there; header names are compared case-insensitively, as HTTP says). Where a route allows a
#: credential in the URL (a browser cannot set headers on a WebSocket) one query parameter is read after them:
#: :data:`QueryParameter`. A realtime socket's first message may carry one too (:func:`secret_from_message`).
KEY_HEADERS: Final = ("xi-api-key", "X-Api-Key", "X-Vapi-Secret")
#: Every header a credential may come in: what a server's CORS must let a page send.
CREDENTIAL_HEADERS: Final = (*KEY_HEADERS, "Authorization")

#: Query parameters that may carry a credential: ``authorization`` on the realtime socket (an Authorization value,
#: the ``Bearer`` scheme optional), ``session_token`` on the avatar's stream routes (the token as is).
QueryParameter = Literal["authorization", "session_token"]


@dataclass(frozen=True, slots=True)
class Presented:
    """The secret a request presents (None: none) and whether it came in the query string."""

    secret: str | None
    in_query: bool = False


def _strip_bearer(value: str) -> str | None:
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def secret_from_headers(headers: Mapping[str, str]) -> str | None:
    """The secret in :data:`KEY_HEADERS` or ``Authorization: Bearer``, in that order; None if absent."""
    for name in KEY_HEADERS:
        key = headers.get(name, "").strip()
        if key:
            return key
    authorization = headers.get("Authorization")
    return _strip_bearer(authorization) if authorization else None


def _from_authorization_value(value: object) -> str | None:
    # A browser's query parameter or a BOS field: "Bearer <token>", tolerated without the scheme too.
    if not isinstance(value, str) or not value.strip():
        return None
    return _strip_bearer(value) or (value.strip() if " " not in value.strip() else None)


def read_credential(request: web.Request, query: QueryParameter | None = None) -> Presented:
    """The secret ``request`` presents: headers first, then the query parameter ``query`` where the route allows one."""
    secret = secret_from_headers(request.headers)
    if secret is not None or query is None:
        return Presented(secret)
    value = request.query.get(query)
    if query == "authorization":
        secret = _from_authorization_value(value)
    elif value is not None:
        secret = value.strip() or None
    return Presented(secret, in_query=secret is not None)


def secret_from_request(request: web.Request) -> str | None:
    """For the realtime WebSocket: headers first, then the URL-encoded ``authorization=Bearer …`` query parameter."""
    return read_credential(request, "authorization").secret


def secret_from_message(msg: Mapping[str, Any]) -> str | None:
    """The secret in a realtime first message: ``authorization`` (Bearer), ``xi_api_key`` or ``xi-api-key``."""
    found = _from_authorization_value(msg.get("authorization"))
    if found:
        return found
    for name in ("xi_api_key", "xi-api-key"):
        value = msg.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _missing() -> AuthError:
    return AuthError(ApiCode.MISSING_API_KEY, "No API key was sent: use 'Authorization: Bearer <key>' or 'xi-api-key'.")


def _invalid(message: str = "Invalid API key.") -> AuthError:
    return AuthError(ApiCode.INVALID_API_KEY, message)


def _unavailable() -> AuthError:
    return AuthError(
        ApiCode.SERVICE_UNAVAILABLE, "The keys table cannot be reached; try again shortly.", http_status=503
    )


def _throttled() -> AuthError:
    return AuthError(
        ApiCode.RATE_LIMIT_EXCEEDED, "Too many invalid keys from this address; try again shortly.", http_status=429
    )


@dataclass(slots=True)
class _Cached:
    credential: Credential | None  # None: unknown or revoked
    until: float
    loaded: float  # when the table was read


class Authenticator:
    """Resolves a presented secret to a Credential, and mints ephemeral tokens into the keys table."""

    def __init__(
        self,
        static_keys: tuple[str, ...] = (),
        store: KeyStore | None = None,
        *,
        clock: Callable[[], float] = time.time,
        cache_ttl_s: float = MAX_CACHE_TTL_S,
        cache_size: int = 10_000,
        max_failures_per_min: int = 60,
        max_concurrent_lookups: int = 10,
        trusted_proxies: tuple[IPNetwork, ...] = (),
    ) -> None:
        self._static = tuple(key.encode() for key in static_keys)
        # The fingerprints a token minted by a static key names as its parent: it works while its key is configured.
        self._static_ids = frozenset(fingerprint(key) for key in static_keys)
        self.store = store
        self.clock = clock
        self.cache_ttl_s = max(0.0, min(cache_ttl_s, MAX_CACHE_TTL_S))
        self._cache_size = cache_size
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        # Unknown and revoked secrets: their own LRU, so made-up keys never push real ones out of the cache.
        self._negative: OrderedDict[str, _Cached] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[_Cached]] = {}
        # Per client address: failed look-ups of zsk_ secrets.
        self.max_failures_per_min = max_failures_per_min
        self._failures = FailureLimiter(max_failures_per_min, cache_size)
        # Table reads at once, on this front, whoever asks.
        self._lookup_slots = asyncio.Semaphore(max_concurrent_lookups)
        self.trusted_proxies = trusted_proxies

    @classmethod
    def from_settings(cls, settings: Settings, **kwargs: Any) -> Authenticator:
        """The authenticator a server's settings describe (``kwargs``: clock, cache options, for tests)."""
        store = KeyStore(settings.auth.keys_table, config=client_config(settings)) if settings.auth.keys_table else None
        kwargs.setdefault("cache_ttl_s", settings.auth.cache_ttl_s)
        kwargs.setdefault("max_failures_per_min", settings.auth.max_failures_per_min)
        kwargs.setdefault("max_concurrent_lookups", settings.auth.max_concurrent_lookups)
        kwargs.setdefault("trusted_proxies", settings.http.trusted_proxies)
        return cls(settings.auth.static_keys, store, **kwargs)

    def client_of(self, request: web.Request) -> str | None:
        """The address ``request``'s failures count against (``X-Forwarded-For`` only from trusted proxies)."""
        return client_address(request.remote, request.headers.getall("X-Forwarded-For", []), self.trusted_proxies)

    @property
    def is_open(self) -> bool:
        """No key and no table configured: every request is allowed."""
        return not self._static and self.store is None

    async def start(self) -> None:
        """Open the table client and check the table exists, so a misconfiguration fails start-up."""
        if self.store is None:
            return
        await self.store.open()
        if not await self.store.exists():
            raise KeyStoreError(f"keys table {self.store.table!r} does not exist (create it with 'zsynth keys create')")

    async def close(self) -> None:
        """Release the table client."""
        for task in self._inflight.values():
            task.cancel()
        if self.store is not None:
            await self.store.close()

    def clear_cache(self) -> None:
        """Forget every cached table look-up (benchmarks and tests)."""
        self._cache.clear()
        self._negative.clear()

    async def verify(
        self, secret: str | None, *, max_age: float | None = None, client: str | None = None
    ) -> Credential:
        """Return the credential for ``secret`` or raise AuthError (missing_api_key / invalid_api_key).

        ``max_age``: use a cached table look-up only when it was read at most that many seconds ago (the periodic
        re-check of live sockets passes half the cache time, so they end within the cache time of a revocation).
        ``client``: the caller's address (:meth:`client_of`); once it made ``max_failures_per_min`` failed look-ups
        (``zsk_`` secrets the table does not hold, cached or not) in the last minute its next ones get 429
        ``rate_limit_exceeded`` instead of 401, and it waits for no table look-up slot. A key or token that is found
        passes whatever the address did.
        """
        if self.is_open:
            return OPEN
        if not secret:
            raise _missing()
        try:
            presented = secret.encode()
        except UnicodeEncodeError:  # a header with bytes that are not UTF-8: no key of ours looks like that
            raise _invalid() from None
        # Compare against every key without an early exit, in constant time per key.
        matched = False
        for key in self._static:
            matched |= hmac.compare_digest(presented, key)
        if matched:
            return Credential("full", fingerprint(secret))  # static keys are in the default workspace
        # Only our own prefixes can be in the table: anything else is refused without a look-up (and costs nothing,
        # so it is not counted against its address either).
        if self.store is None or not secret.startswith((LIVE_PREFIX, TEMP_PREFIX)) or len(secret) > _MAX_SECRET_LEN:
            raise _invalid()
        credential = await self._lookup(secret_hash(secret), secret, max_age, client)
        if credential is None:
            raise self._failed(client, _invalid())
        if credential.expires_at is not None and credential.expires_at <= self.clock():
            raise _invalid("This token has expired.")
        if credential.parent_hash is not None:
            if await self._lookup(credential.parent_hash, None, max_age) is None:
                raise _invalid("The key that minted this token has been revoked.")
        elif credential.parent is not None and credential.parent not in self._static_ids:
            # Minted by a static key (it has no row): the token lives only as long as that key is configured here.
            raise _invalid("The key that minted this token is no longer configured on this server.")
        return credential

    async def check_minter(self, credential: Credential) -> None:
        """AuthError unless the key that minted the token ``credential`` still works here (revoked, or a static key
        no longer configured: refused); for tokens checked outside :meth:`verify` (single-use tokens)."""
        if credential.parent_hash is not None:
            if await self._lookup(credential.parent_hash, None) is None:
                raise _invalid("The key that minted this token has been revoked.")
        elif credential.parent is not None and credential.parent not in self._static_ids:
            raise _invalid("The key that minted this token is no longer configured on this server.")

    def _failed(self, client: str | None, err: AuthError) -> AuthError:
        """Count a failed look-up of ``client``: ``err`` while it is within its limit, 429 once it is over."""
        if client is None or self._failures.fail(client):
            return err
        return _throttled()

    def _fresh(self, key_hash: str, max_age: float | None) -> _Cached | None:
        """The cached answer for ``key_hash`` (positive or negative) while it is still good, else None."""
        now = self.clock()
        cached = self._cache.get(key_hash) or self._negative.get(key_hash)
        if cached is None or cached.until <= now or (max_age is not None and now - cached.loaded > max_age):
            return None
        return cached

    async def _lookup(
        self, key_hash: str, secret: str | None, max_age: float | None = None, client: str | None = None
    ) -> Credential | None:
        """The credential stored under ``key_hash``; ``secret`` None means a token's parent (a full key)."""
        cached = self._fresh(key_hash, max_age)
        if cached is not None:
            return cached.credential
        # One table read per hash at a time, however many requests wait for it.
        task = self._inflight.get(key_hash)
        if task is None:
            # An address over its failure limit may still be sending a real key, so it is looked up, but only when a
            # slot is free now: it never queues ahead of, or instead of, anyone else's look-up.
            if client is not None and self._lookup_slots.locked() and self._failures.exhausted(client):
                raise _throttled()
            task = asyncio.ensure_future(self._load(key_hash, secret))
            self._inflight[key_hash] = task
            task.add_done_callback(lambda done: self._loaded(key_hash, done))
        entry = await asyncio.shield(task)
        return entry.credential

    def _loaded(self, key_hash: str, task: asyncio.Task[_Cached]) -> None:
        self._inflight.pop(key_hash, None)
        if task.cancelled() or task.exception() is not None:
            return
        self._remember(key_hash, task.result())

    def _remember(self, key_hash: str, entry: _Cached) -> None:
        cache, other = (self._cache, self._negative) if entry.credential is not None else (self._negative, self._cache)
        other.pop(key_hash, None)
        cache[key_hash] = entry
        cache.move_to_end(key_hash)
        while len(cache) > self._cache_size:
            cache.popitem(last=False)

    async def _load(self, key_hash: str, secret: str | None) -> _Cached:
        assert self.store is not None
        try:
            async with asyncio.timeout(LOOKUP_WAIT_S):
                await self._lookup_slots.acquire()
        except TimeoutError:
            logger.warning("keys table look-up for key %s: no free slot within %g s", key_hash[:12], LOOKUP_WAIT_S)
            raise _unavailable() from None
        try:
            record = await self.store.get(key_hash)
        except KeyStoreError as err:
            logger.warning("keys table look-up for key %s failed: %s", key_hash[:12], err)
            raise _unavailable() from err
        finally:
            self._lookup_slots.release()
        now = self.clock()
        credential = self._credential(secret, key_hash, record)
        until = now + self.cache_ttl_s
        # Never cache a live token past its expiry; an expired one stays expired, so it may be cached in full.
        if credential is not None and credential.expires_at is not None and credential.expires_at > now:
            until = min(until, credential.expires_at)
        return _Cached(credential, until, now)

    @staticmethod
    def _credential(secret: str | None, key_hash: str, record: KeyRecord | None) -> Credential | None:
        if record is None or record.revoked_at is not None:
            return None
        workspace = record.workspace or workspaces.DEFAULT  # rows from before workspaces: the default one
        if secret is None:  # a token's parent: only a live full key counts
            return (
                Credential("full", record.key_id, record.expires_at, record.scope, key_hash, workspace=workspace)
                if record.kind == "full"
                else None
            )
        # The prefix must agree with the stored kind, so a full key can never pass as a token or the reverse.
        if record.kind == "full" and secret.startswith(LIVE_PREFIX):
            return Credential("full", record.key_id, record.expires_at, record.scope, key_hash, workspace=workspace)
        if record.kind == "ephemeral" and secret.startswith(TEMP_PREFIX) and record.expires_at is not None:
            scope, server = record.scope, _minted_by(record)
            if scope == _LEGACY_AVATAR_SCOPE:
                scope = SPEECH_SCOPE
            return Credential(
                "ephemeral",
                record.key_id,
                record.expires_at,
                scope,
                key_hash,
                record.parent_hash,
                record.parent,
                server,
                workspace,
            )
        return None

    async def mint_token(
        self,
        ttl_seconds: int,
        scope: str = SPEECH_SCOPE,
        *,
        server: TokenServer = SPEECH_SERVER,
        parent: Credential | None = None,
    ) -> tuple[str, int]:
        """Mint a ``zsk_temp_`` token for ``server`` (recorded: the only server it works on); returns
        (token, expires_at). Needs the keys table."""
        if self.store is None:
            raise AuthError(
                ApiCode.NOT_SUPPORTED, "Ephemeral tokens need a keys table (ZSYNTH_API_KEYS_TABLE).", http_status=501
            )
        if parent is not None and not parent.is_full:
            raise AuthError("insufficient_scope", "An ephemeral token cannot mint tokens; use a full API key.")
        if ttl_seconds < 1:
            raise ValueError("ttl_seconds must be at least 1")
        if parent is not None and parent.key_hash is not None:
            # Read the key afresh: a front that cached it must not mint for it once it is revoked.
            if await self._lookup(parent.key_hash, None, max_age=0.0) is None:
                raise _invalid("This key has been revoked.")
        token = TEMP_PREFIX + secrets.token_urlsafe(24)  # 192 random bits
        now = self.clock()
        expires_at = int(now) + ttl_seconds
        key_hash = secret_hash(token)
        record = KeyRecord(
            key_id=fingerprint(token),
            kind="ephemeral",
            scope=scope,
            created_at=int(now),
            expires_at=expires_at,
            parent=parent.fingerprint if parent is not None else None,
            parent_hash=parent.key_hash if parent is not None else None,
            server=server,
            # The token acts in its key's workspace: recorded now, so every front reads it with the token.
            workspace=parent.workspace if parent is not None else workspaces.DEFAULT,
        )
        try:
            await self.store.put(key_hash, record)
        except KeyStoreError as err:
            logger.warning("minting a token failed: %s", err)
            raise _unavailable() from err
        # Its first use on this front (a page calls at once) then needs no look-up.
        self._remember(
            key_hash, _Cached(self._credential(token, key_hash, record), min(now + self.cache_ttl_s, expires_at), now)
        )
        logger.info("minted %s token %s (expires %d) by key %s", server, record.key_id, expires_at, record.parent)
        return token, expires_at

    async def create_key(self, name: str = "", workspace: str = workspaces.DEFAULT) -> tuple[str, KeyRecord]:
        """Create a ``zsk_live_`` full key in the table, in ``workspace``; returns (key, record). The key is shown
        once, never stored. ValueError for a name that is not a workspace name."""
        if self.store is None:
            raise AuthError(ApiCode.NOT_SUPPORTED, "Creating keys needs a keys table (ZSYNTH_API_KEYS_TABLE).", 501)
        workspaces.check_name(workspace)
        key = LIVE_PREFIX + secrets.token_urlsafe(32)  # 256 random bits
        record = KeyRecord(
            key_id=fingerprint(key),
            kind="full",
            scope="all",
            created_at=int(self.clock()),
            name=name,
            workspace=workspace,
        )
        await self.store.put(secret_hash(key), record)
        return key, record


def _minted_by(record: KeyRecord) -> TokenServer | None:
    """The server a token's record says minted it (None: a value no server of ours writes, so it works nowhere).
    Records from before the field was written: the avatar's carried the scope ``avatar``, the rest are the speech
    API's."""
    if record.server is None:
        return AVATAR_SERVER if record.scope == _LEGACY_AVATAR_SCOPE else SPEECH_SERVER
    if record.server == AVATAR_SERVER:
        return AVATAR_SERVER
    return SPEECH_SERVER if record.server == SPEECH_SERVER else None


# Shortest interval between re-checks of a live credential (with ZSYNTH_AUTH_CACHE_TTL=0).
MIN_RECHECK_S: Final = 1.0


async def watch_credential(
    authenticator: Authenticator,
    secret: str,
    credential: Credential,
    on_refused: Callable[[AuthError], Awaitable[None]],
) -> None:
    """For a live socket or session: call ``on_refused`` once its credential expires or is revoked, then return.

    The credential is re-checked every half cache time with look-ups at most that old, so a revocation is seen
    within ZSYNTH_AUTH_CACHE_TTL and an expiry at once. An unreachable keys table keeps the socket (it was valid
    when last read). Static keys and open servers are never re-checked: they cannot expire or be revoked.
    """
    if credential.key_hash is None:
        return
    period = max(authenticator.cache_ttl_s / 2, MIN_RECHECK_S)
    current: Credential | None = credential
    while current is not None:
        wait = period
        if current.expires_at is not None:
            wait = min(wait, current.expires_at - authenticator.clock())
        await asyncio.sleep(max(wait, 0.0))
        try:
            current = await authenticator.verify(secret, max_age=period)
        except AuthError as err:
            if err.http_status >= 500:
                logger.warning("credential %s: re-check failed: %s", credential.fingerprint, err.message)
                continue
            logger.info("credential %s: no longer valid (%s)", credential.fingerprint, err.message)
            await on_refused(err)
            return


AUTHENTICATOR: Final = web.AppKey("authenticator", Authenticator)
# The caller of a request, set by the access middleware.
CREDENTIAL: Final = web.RequestKey("credential", Credential)
