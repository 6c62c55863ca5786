"""Test-only helpers: an error answer's code, the socket log after a close."""

from __future__ import annotations

import asyncio
from typing import Any


async def status_and_code(resp: Any) -> tuple[int, str]:
    """An error answer's HTTP status and its envelope's ``detail.code``."""
    return resp.status, (await resp.json())["detail"]["code"]


async def socket_log_after_close(caplog: Any) -> list[str]:
    """The front's socket log lines once it has logged a socket's close (after its handler has finished)."""

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name.startswith("zsynth.speech.ws")]

    for _ in range(100):
        if any(" closed (" in line for line in lines()):
            break
        await asyncio.sleep(0.05)
    return lines()
