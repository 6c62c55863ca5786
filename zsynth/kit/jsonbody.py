"""Reading JSON from hostile clients: every malformed body becomes a ValueError, never a 500, and no body past the
route's limit is read, let alone parsed.

JSON bodies are bounded by ZSYNTH_MAX_JSON_BODY_BYTES (256 KiB by default), small enough that parsing them on the
event loop takes about a millisecond: they are parsed there. The 25 MiB ZSYNTH_MAX_BODY_BYTES is for multipart
uploads, which are read part by part and never handed to ``json``.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


class BadJson(ValueError):
    """A body that is not one strict JSON document in UTF-8."""


class BodyTooLarge(ValueError):
    """A body over the route's limit (``limit`` bytes); the caller answers 413 in its envelope."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"The request body exceeds the limit of {limit} bytes.")
        self.limit = limit


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON (RFC 8259) does not, and no client of this API sends them.
    raise BadJson(f"{name} is not valid JSON")


def loads(raw: bytes | str) -> Any:
    """Parse strict JSON, raising BadJson for anything a client may send wrong.

    Beyond JSONDecodeError, hostile bodies raise other errors from the parser: invalid UTF-8 (UnicodeDecodeError),
    integers over Python's 4300-digit limit (plain ValueError) and deep nesting (RecursionError).
    """
    try:
        # JSON is UTF-8 (RFC 8259): decode strictly ourselves, whatever charset the Content-Type claims; a declared
        # bogus charset would otherwise raise LookupError in aiohttp's request.text().
        text = raw.decode("utf-8-sig") if isinstance(raw, bytes) else raw
        return json.loads(text, parse_constant=_reject_constant)
    except BadJson:
        raise
    except (ValueError, RecursionError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise BadJson(str(err)) from err


async def read_limited(request: web.Request, limit: int) -> bytes:
    """The request body, at most ``limit`` bytes, or BodyTooLarge.

    A declared Content-Length over the limit is refused before a byte is read; a chunked or understated body stops
    being read as soon as it passes the limit (aiohttp then discards the rest of it, so the client reads the 413).
    """
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge(limit)
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(limit)
    return bytes(body)


async def read_json(request: web.Request, limit: int) -> Any:
    """The request body as strict JSON (BadJson if malformed; BodyTooLarge past ``limit`` bytes)."""
    return loads(await read_limited(request, limit))
