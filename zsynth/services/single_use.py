"""ElevenLabs' single-use tokens: minted by a key for a browser, redeemed once by a realtime socket.

``POST /v1/single-use-token/tts_websocket`` mints a ``sutkn_`` token (:func:`mint`) valid for 15 minutes; a TTS or
dialogue socket takes it as ``?single_use_token=`` (:func:`redeem`) in place of a key. Redis holds the token's record
under its SHA-256 (never the token itself) with the lifetime as its TTL, and a redemption is one ``GETDEL``: of any
number of fronts presenting one token at once, exactly one gets the record, so a token opens one socket at most.

The socket's credential is a token of scope ``tts`` (socket synthesis only: no HTTP route reads the parameter, and
the token is no key anywhere else) whose owner is the minting key, so its jobs and its socket count against that key's
share, as an ephemeral token's do. Its minting key is checked again when it is redeemed.

A key holds at most ``ZSYNTH_SINGLE_USE_MAX_UNSPENT`` unspent tokens (ElevenLabs states no such limit): each key has a
sorted set of its tokens' hashes scored by expiry (:func:`~zsynth.core.protocol.single_use_unspent_key`), which a
mint trims of the expired and counts in the same atomic script that stores the token
(:data:`~zsynth.core.protocol.SINGLE_USE_MINT_LUA`), and a redemption leaves. Past the cap a mint is refused
(:class:`TooManyUnspent`, 429) until one is spent or expires.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable
from typing import Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

from zsynth.core import workspaces
from zsynth.core.codes import ApiCode
from zsynth.core.protocol import SINGLE_USE_MINT_LUA, single_use_token_key, single_use_unspent_key
from zsynth.services.auth import OPEN, SPEECH_SCOPE, SPEECH_SERVER, AuthError, Credential, fingerprint, secret_hash

logger = logging.getLogger(__name__)

TOKEN_PREFIX: Final = "sutkn_"
#: A token's life, as ElevenLabs documents it: 15 minutes.
TTL_S: Final = 15 * 60
#: The types zsynth mints; ElevenLabs' others are speech-to-text, which zsynth does not serve.
TOKEN_TYPES: Final = ("tts_websocket",)
ELEVENLABS_TYPES: Final = ("tts_websocket", "realtime_scribe", "batch_scribe")
# Longer values are not ours: refused before hashing or asking Redis.
_MAX_TOKEN_CHARS: Final = 128


class TooManyUnspent(AuthError):
    """429 ``rate_limit_exceeded``: the minting key already holds its cap of unspent tokens; ``retry_after_s`` is
    when its oldest one expires (spending one frees a place sooner)."""

    def __init__(self, cap: int, retry_after_s: int) -> None:
        super().__init__(
            ApiCode.RATE_LIMIT_EXCEEDED,
            f"This key already holds {cap} unspent single-use tokens: use or let expire one before minting another.",
            429,
        )
        self.retry_after_s = retry_after_s


def _unavailable() -> AuthError:
    return AuthError(ApiCode.SERVICE_UNAVAILABLE, "Single-use tokens cannot be read or written right now.", 503)


def _owner(parent: str | None) -> str:
    """Whose unspent tokens a token counts among: its minting key's fingerprint (an open server's are all one's)."""
    return parent or OPEN.fingerprint


async def mint(
    redis: Redis,
    token_type: str,
    minter: Credential,
    *,
    max_unspent: int,
    clock: Callable[[], float] = time.time,
) -> str:
    """A new token of ``token_type`` (one of :data:`TOKEN_TYPES`) owned by ``minter``'s key, unless that key already
    holds ``max_unspent`` unspent ones (:class:`TooManyUnspent`); AuthError 503 when Redis does not take it."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(24)  # 192 random bits
    now = clock()
    parent = minter.owner if minter.kind != "open" else None
    record = {
        "type": token_type,
        "parent": parent,
        "parent_hash": minter.key_hash if minter.kind == "full" else minter.parent_hash,
        "created_at": int(now),
        "workspace": minter.workspace,  # the token acts in its key's workspace
    }
    token_hash = secret_hash(token)
    keys = [single_use_token_key(token_hash), single_use_unspent_key(_owner(parent))]
    args: list[str | int | float] = [json.dumps(record), TTL_S, now, now + TTL_S, max_unspent, token_hash]
    try:
        retry_after_s = int(await redis.register_script(SINGLE_USE_MINT_LUA)(keys=keys, args=args))
    except RedisError as err:
        logger.warning("minting a single-use token failed: %r", err)
        raise _unavailable() from err
    if retry_after_s:
        logger.info("single-use token refused: key %s holds %d unspent", parent or "-", max_unspent)
        raise TooManyUnspent(max_unspent, min(retry_after_s, TTL_S))
    logger.info("minted single-use token %s (%s) by key %s", fingerprint(token), token_type, parent or "-")
    return token


async def redeem(redis: Redis, token: str, token_type: str) -> Credential:
    """The credential of ``token``, consumed now: AuthError ``invalid_api_key`` when it is unknown, expired, already
    used or of another type; 503 when Redis does not answer."""
    refused = AuthError(ApiCode.INVALID_API_KEY, "This single-use token is unknown, expired or already used.")
    if not token.startswith(TOKEN_PREFIX) or len(token) > _MAX_TOKEN_CHARS:
        raise refused
    token_hash = secret_hash(token)
    try:
        raw = await redis.getdel(single_use_token_key(token_hash))
    except RedisError as err:
        logger.warning("redeeming single-use token %s failed: %r", fingerprint(token), err)
        raise _unavailable() from err
    if raw is None:
        raise refused
    record = json.loads(raw)
    try:
        # Spent: its key's place is free. Apart from the GETDEL, which alone decides who spends it: should this fail,
        # the place frees when the token would have expired.
        await redis.zrem(single_use_unspent_key(_owner(record.get("parent"))), token_hash)
    except RedisError as err:
        logger.warning("single-use token %s: freeing its place failed: %r", fingerprint(token), err)
    if record.get("type") != token_type:
        raise AuthError(ApiCode.INVALID_API_KEY, f"This single-use token is not a {token_type} token.")
    logger.info("redeemed single-use token %s (key %s)", fingerprint(token), record.get("parent") or "-")
    return Credential(
        "ephemeral",
        fingerprint(token),
        scope=SPEECH_SCOPE,
        parent_hash=record.get("parent_hash"),
        parent=record.get("parent"),
        server=SPEECH_SERVER,
        workspace=workspaces.owner_of(record),  # a record from before workspaces: the default one
    )
