"""Helpers for the realtime socket tests: a raw client that collects what a user receives."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp


@dataclass
class Received:
    """Everything a socket sent before it closed."""

    frames: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None

    def audio(self, context: Any = ...) -> bytes:
        """The concatenated audio of every frame (of one context when given)."""
        return b"".join(
            base64.b64decode(f["audio"])
            for f in self.frames
            if f.get("audio") and (context is ... or f.get("contextId") == context)
        )

    def chars(self, context: Any = ...) -> str:
        """The alignment characters of every frame, joined."""
        return "".join(
            "".join(f["alignment"]["chars"])
            for f in self.frames
            if f.get("alignment") and (context is ... or f.get("contextId") == context)
        )

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [f for f in self.frames if "error" in f]

    @property
    def finals(self) -> list[dict[str, Any]]:
        return [f for f in self.frames if f.get("isFinal") is True]


async def collect(ws: aiohttp.ClientWebSocketResponse, timeout: float = 60.0) -> Received:
    """Read frames until the server closes the socket."""
    got = Received()
    while True:
        msg = await ws.receive(timeout=timeout)
        if msg.type is aiohttp.WSMsgType.TEXT:
            got.frames.append(json.loads(msg.data))
        elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
            break
        elif msg.type is aiohttp.WSMsgType.ERROR:
            break
    got.close_code = ws.close_code
    return got


def squash(text: str) -> str:
    """Text with its white space collapsed, as alignment characters spell it."""
    return " ".join(text.split())
