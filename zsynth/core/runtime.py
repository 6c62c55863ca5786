"""How every zsynth process runs its main coroutine: on uvloop where it is installed."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def run_forever(main: Coroutine[Any, Any, None], fatal: tuple[type[Exception], ...] = ()) -> None:
    """Run a process's main coroutine on uvloop when available; an exception of a ``fatal`` kind (a bad voice pin,
    a bad TLS pair: already explained in the log) exits with its message only, without a traceback."""
    try:
        _run_loop(main)
    except fatal as err:
        raise SystemExit(f"zsynth: {err}") from err


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is a Linux/macOS wheel; elsewhere the standard loop serves
        asyncio.run(main)
        return
    uvloop.run(main)
