"""ElevenLabs' single-use tokens: minted by a key for a browser, redeemed once by a realtime socket.

``POST /v1/single-use-token/tts_websocket`` mints a ``sutkn_`` token (:func:`mint`) valid for 15 minutes; a TTS or
dialogue socket takes it as ``?single_use_token=`` (:func:`redeem`) in place of a key. Redis holds the token's record
under its SHA-256 (never the token itself) with the lifetime as its TTL, and a redemption is one ``GETDEL``: of any
number of fronts presenting one token at once, exactly one gets the record, so a token opens one socket at most.

The socket's credential is a token of scope ``tts`` (socket synthesis only: no HTTP route reads the parameter, and
the token is no key anywhere else) whose owner is the minting key, so its jobs and its socket count against that key's
share, as an ephemeral token's do. Its minting key is checked again when it is redeemed.
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

from zsynth.core.protocol import single_use_token_key
from zsynth.services.auth import SPEECH_SCOPE, AuthError, Credential, fingerprint, secret_hash

logger = logging.getLogger(__name__)

TOKEN_PREFIX: Final = "sutkn_"
#: A token's life, as ElevenLabs documents it: 15 minutes.
TTL_S: Final = 15 * 60
#: The types zsynth mints; ElevenLabs' others are speech-to-text, which zsynth does not serve.
TOKEN_TYPES: Final = ("tts_websocket",)
ELEVENLABS_TYPES: Final = ("tts_websocket", "realtime_scribe", "batch_scribe")
# Longer values are not ours: refused before hashing or asking Redis.
_MAX_TOKEN_CHARS: Final = 128


def _unavailable() -> AuthError:
    return AuthError("service_unavailable", "Single-use tokens cannot be read or written right now.", 503)


async def mint(redis: Redis, token_type: str, minter: Credential, *, clock: Callable[[], float] = time.time) -> str:
    """A new token of ``token_type`` (one of :data:`TOKEN_TYPES`) owned by ``minter``'s key; AuthError 503 when Redis
    does not take it."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(24)  # 192 random bits
    record = {
        "type": token_type,
        "parent": minter.owner if minter.kind != "open" else None,
        "parent_hash": minter.key_hash if minter.kind == "full" else minter.parent_hash,
        "created_at": int(clock()),
    }
    try:
        await redis.set(single_use_token_key(secret_hash(token)), json.dumps(record), ex=TTL_S, nx=True)
    except RedisError as err:
        logger.warning("minting a single-use token failed: %r", err)
        raise _unavailable() from err
    logger.info("minted single-use token %s (%s) by key %s", fingerprint(token), token_type, record["parent"] or "-")
    return token


async def redeem(redis: Redis, token: str, token_type: str) -> Credential:
    """The credential of ``token``, consumed now: AuthError ``invalid_api_key`` when it is unknown, expired, already
    used or of another type; 503 when Redis does not answer."""
    refused = AuthError("invalid_api_key", "This single-use token is unknown, expired or already used.")
    if not token.startswith(TOKEN_PREFIX) or len(token) > _MAX_TOKEN_CHARS:
        raise refused
    try:
        raw = await redis.getdel(single_use_token_key(secret_hash(token)))
    except RedisError as err:
        logger.warning("redeeming single-use token %s failed: %r", fingerprint(token), err)
        raise _unavailable() from err
    if raw is None:
        raise refused
    record = json.loads(raw)
    if record.get("type") != token_type:
        raise AuthError("invalid_api_key", f"This single-use token is not a {token_type} token.")
    logger.info("redeemed single-use token %s (key %s)", fingerprint(token), record.get("parent") or "-")
    return Credential(
        "ephemeral",
        fingerprint(token),
        scope=SPEECH_SCOPE,
        parent_hash=record.get("parent_hash"),
        parent=record.get("parent"),
    )
