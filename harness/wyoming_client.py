"""Helpers for the Wyoming tests: a front with its listener, raw connections, and what a refused or broken one reads."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from zsynth.core.config import Settings
from zsynth.speech.app import create_app
from zsynth.speech.wyoming.listener import LISTENER, Listener


async def wyoming_listener(aiohttp_client: Any, settings: Settings) -> Listener:
    """Start the speech front with its Wyoming listener (``settings.wyoming.uri``); return the listener."""
    assert settings.wyoming.uri is not None
    client = await aiohttp_client(create_app(settings))
    listener: Listener = client.app[LISTENER]
    return listener


async def wyoming_front(aiohttp_client: Any, settings: Settings) -> int:
    """Start the speech front with its Wyoming listener; return the listener's port."""
    return (await wyoming_listener(aiohttp_client, settings)).port


async def raw_connection(port: int, source: str = "127.0.0.1") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A plain TCP connection to the listener, from ``source`` (any 127.0.0.0/8 address is a client address of its
    own on loopback)."""
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), 10)


async def read_wire_event(reader: asyncio.StreamReader) -> tuple[str, dict[str, Any]] | None:
    """The next event's type and data block as a client reads them; None when the server closed first."""
    line = await asyncio.wait_for(reader.readline(), 10)
    if not line:
        return None
    header = json.loads(line)
    data = json.loads(await reader.readexactly(header["data_length"])) if header.get("data_length") else {}
    if header.get("payload_length"):
        await reader.readexactly(header["payload_length"])
    return header["type"], data


async def error_then_close(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The data of the ``error`` event the server sends before it closes the connection."""
    event = await read_wire_event(reader)
    assert event is not None, "the connection closed without an error event"
    kind, data = event
    assert kind == "error", f"expected an error event, got {kind}"
    assert await asyncio.wait_for(reader.read(), 10) == b"", "the connection should close after the error"
    return data


async def until(predicate: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    """Wait, without blocking the loop the front runs on, until ``predicate()`` is true; fail after ``timeout``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"not within {timeout:g}s: {what}"
        await asyncio.sleep(0.02)
