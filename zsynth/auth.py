"""Authentication core shared by the speech API and the avatar server.

A request's credential is resolved to a :class:`Credential` by an :class:`Authenticator`; each server decides from
the route whether that credential kind may call it, and renders failures in its own envelope. This first version
knows static keys only (``ZSYNTH_API_KEY`` / ``ZSYNTH_API_KEYS``); the keys table and ephemeral tokens extend it.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Final, Literal

CredentialKind = Literal["open", "full", "ephemeral"]

TEMP_PREFIX: Final = "zsk_temp_"
LIVE_PREFIX: Final = "zsk_live_"


class AuthError(Exception):
    """A credential was refused; ``status`` is one of the spec's auth statuses."""

    def __init__(self, status: str, message: str, http_status: int = 401) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.http_status = http_status


@dataclass(frozen=True, slots=True)
class Credential:
    """Who is calling: an open server, a full key, or an ephemeral token (scope ``tts``)."""

    kind: CredentialKind
    fingerprint: str = ""  # safe to log: a short hash, never the secret
    expires_at: float | None = None
    scope: str = "all"

    @property
    def is_full(self) -> bool:
        """Full keys (and an open server) may call every route."""
        return self.kind in ("open", "full")


OPEN: Final = Credential("open", fingerprint="open")


def fingerprint(secret: str) -> str:
    """A short, non-reversible tag for logs."""
    return hashlib.sha256(secret.encode()).hexdigest()[:10]


class Authenticator:
    """Resolves a presented secret to a Credential."""

    def __init__(self, static_keys: tuple[str, ...]) -> None:
        self._static = tuple(key.encode() for key in static_keys)

    @property
    def is_open(self) -> bool:
        """No key configured: every request is allowed."""
        return not self._static

    async def verify(self, secret: str | None) -> Credential:
        """Return the credential for ``secret`` or raise AuthError (missing_api_key / invalid_api_key)."""
        if self.is_open:
            return OPEN
        if not secret:
            raise AuthError(
                "missing_api_key", "No API key was sent: use 'Authorization: Bearer <key>' or 'xi-api-key'."
            )
        presented = secret.encode()
        # Compare against every key without an early exit, in constant time per key.
        matched = False
        for key in self._static:
            matched |= hmac.compare_digest(presented, key)
        if matched:
            return Credential("full", fingerprint(secret))
        raise AuthError("invalid_api_key", "Invalid API key.")

    async def mint_token(self, ttl_seconds: int, scope: str = "tts") -> tuple[str, int]:
        """Mint an ephemeral ``zsk_temp_`` token; returns (token, expires_at). Needs the keys table."""
        raise AuthError("not_supported", "Ephemeral tokens need a keys table (ZSYNTH_API_KEYS_TABLE).", http_status=501)

    async def close(self) -> None:
        """Release resources (table clients)."""
