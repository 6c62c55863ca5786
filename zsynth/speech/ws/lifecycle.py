"""The life of a realtime socket: upgrade, registry of open sockets, error frame or clean close, and cleanup."""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import WSCloseCode, web

from zsynth.core.codes import ApiCode
from zsynth.core.logs import quoted
from zsynth.kit.errors import ApiError
from zsynth.services.auth import AUTHENTICATOR, secret_from_request
from zsynth.services.keys import SETTINGS, WS_PER_CREDENTIAL, WS_REGISTRY, WS_UNAUTHENTICATED
from zsynth.services.metrics import METRICS
from zsynth.speech.ws.connection import Connection, WsError
from zsynth.speech.ws.speaker import Speaker, cancel_all

logger = logging.getLogger(__name__)

# Protocol-level pings keep NATs and proxies from dropping quiet sockets; the inactivity timeout is separate.
HEARTBEAT_S: Final = 30.0
# How long a server-initiated close waits for the client's close frame.
CLOSE_TIMEOUT_S: Final = 5.0

Body = Callable[[Connection, list[Speaker]], Awaitable[None]]


def _admit_unauthenticated(request: web.Request) -> list[str]:
    """Count a socket that will wait for a credential in its first message: on the front (key ``""``) and for its
    client address; the keys it was counted under. Refused before the upgrade when the address or the front is full.
    """
    settings = request.app[SETTINGS]
    unauthenticated = request.app[WS_UNAUTHENTICATED]
    # The address limits count against everywhere else: the forwarded client behind a trusted proxy.
    address = request.app[AUTHENTICATOR].client_of(request)
    if address is not None and unauthenticated[address] >= settings.ws.max_unauthenticated_per_address:
        raise ApiError(
            429,
            ApiCode.TOO_MANY_CONCURRENT_REQUESTS,
            "Too many sockets from this address are waiting to authenticate; send the key in the first message "
            "sooner, or in the xi-api-key header.",
            headers={"Retry-After": "1"},
        )
    if unauthenticated[""] >= settings.ws.max_unauthenticated:
        # Refused before the upgrade: a socket that has not shown a credential costs nothing more.
        raise ApiError(
            503,
            ApiCode.SYSTEM_BUSY,
            "Too many sockets are waiting to authenticate on this server; try again shortly.",
            headers={"Retry-After": "1"},
        )
    keys = ["", address] if address is not None else [""]
    for key in keys:
        unauthenticated[key] += 1
    return keys


def _uncount(request: web.Request, keys: list[str]) -> None:
    unauthenticated = request.app[WS_UNAUTHENTICATED]
    for key in keys:
        unauthenticated[key] -= 1
        if unauthenticated[key] <= 0:
            del unauthenticated[key]


async def run_socket(request: web.Request, kind: str, body: Body) -> web.WebSocketResponse:
    """Upgrade, run ``body``, and whatever happens cancel every job the socket still has in flight."""
    settings = request.app[SETTINGS]
    # Counted: sockets that will wait for a credential in their first message (one in the upgrade request is
    # checked at once, with no wait).
    counted: list[str] = []
    if not request.app[AUTHENTICATOR].is_open and secret_from_request(request) is None:
        counted = _admit_unauthenticated(request)
    ws = web.WebSocketResponse(
        heartbeat=HEARTBEAT_S, timeout=CLOSE_TIMEOUT_S, max_msg_size=settings.ws.max_message_bytes
    )

    def authenticated() -> None:
        nonlocal counted
        if counted:
            _uncount(request, counted)
            counted = []

    try:
        await ws.prepare(request)
    except BaseException:
        authenticated()  # stop counting it: the upgrade itself failed
        raise
    registry = request.app[WS_REGISTRY]
    registry.add(ws)
    conn = Connection(request, ws, kind, on_authenticated=authenticated)
    speakers: list[Speaker] = []
    logger.info("socket %s: %s open for voice %s", conn.socket_id, kind, quoted(request.match_info.get("voice_id")))
    try:
        await body(conn, speakers)
    except WsError as err:
        await conn.fail(err)
    except ConnectionResetError:
        logger.info("socket %s: client went away", conn.socket_id)
    finally:
        # Runs on a client close, an error and handler cancellation alike: queued and running segments stop.
        # Bookkeeping first, before any await: a cancelled handler may not get past the next one.
        authenticated()
        conn.release()
        registry.discard(ws)
        closed_by_client = ws.closed
        if closed_by_client:  # logged now: the handler is cancelled at its next await when the client is gone
            logger.info("socket %s: closed (%s)", conn.socket_id, ws.close_code)
        # Shielded: the jobs must be cancelled on the workers even if this handler is cancelled again meanwhile.
        await asyncio.shield(cancel_all(speakers))
        if not ws.closed:
            await conn.close(1000)
        if not closed_by_client:
            logger.info("socket %s: closed (%s)", conn.socket_id, ws.close_code)
    return ws


async def close_all(app: web.Application) -> None:
    """On shutdown, close every open realtime socket with GOING_AWAY (1001)."""
    registry = app[WS_REGISTRY]
    sockets = [ws for ws in registry]
    if sockets:
        logger.info("closing %d realtime sockets for shutdown", len(sockets))
    await asyncio.gather(
        *(ws.close(code=WSCloseCode.GOING_AWAY, message=b"Server shutting down") for ws in sockets),
        return_exceptions=True,
    )


async def freeze_startup_heap(app: web.Application) -> None:
    """Keep the start-up heap (modules, numpy, codecs) out of later garbage collections.

    A full collection walks every tracked object; with the front's imports that alone costs tens of ms of event
    loop, a stall every speaking socket would hear. Frozen objects are skipped, so collections only walk what
    requests and sockets create.
    """
    gc.collect()
    gc.freeze()


def setup_registry(app: web.Application) -> None:
    """Create the registry now (on_startup may be too late for tests building the app) and close it on shutdown."""
    registry = weakref.WeakSet[web.WebSocketResponse]()
    app[WS_REGISTRY] = registry
    app[WS_PER_CREDENTIAL] = collections.Counter()
    app[WS_UNAUTHENTICATED] = collections.Counter()
    if METRICS in app:
        app[METRICS].realtime_sockets.set_function(lambda: len(registry))
    app.on_startup.append(freeze_startup_heap)
    app.on_shutdown.append(close_all)
