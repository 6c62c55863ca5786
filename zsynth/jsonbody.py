"""Reading JSON from hostile clients: every malformed body becomes a ValueError, never a 500."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


class BadJson(ValueError):
    """A body that is not one strict JSON document in UTF-8."""


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


async def read_json(request: web.Request) -> Any:
    """The request body as strict JSON (BadJson if malformed; aiohttp's 413 past the body limit)."""
    return loads(await request.read())
