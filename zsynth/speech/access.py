"""Access control of the speech API: the words of its access checks (:class:`~zsynth.kit.gate.Gate`, for HTTP and the
realtime sockets), the auth middleware, the open-server write guard and CORS.

Each reads the route's declaration (:mod:`zsynth.kit.endpoints`): its :class:`~zsynth.kit.endpoints.Access` rule says
who may call it (checked by :mod:`zsynth.kit.gate`), its ``cors`` flag whether pages on other origins may.
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import hdrs, web

from zsynth.core.codes import ApiCode
from zsynth.core.logs import quoted
from zsynth.kit import cors
from zsynth.kit.access import refuses_open_write
from zsynth.kit.answer_headers import AUDIO_HEADER_NAMES
from zsynth.kit.errors import ApiError, Handler
from zsynth.kit.gate import Gate, access_middleware
from zsynth.services.auth import CREDENTIAL_HEADERS, SPEECH_SERVER
from zsynth.services.keys import REQUEST_ID

logger = logging.getLogger(__name__)

CORS_ALLOW_HEADERS: Final = (*CREDENTIAL_HEADERS, "Content-Type", "Accept")
CORS_EXPOSE_HEADERS: Final = (*AUDIO_HEADER_NAMES, "Retry-After")


@web.middleware
async def open_cors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """With no keys and ``*`` CORS, refuse writes from pages on other sites unless their origin is listed or
    ZSYNTH_CORS_OPEN_WRITES is set: any page a visitor opens could otherwise drive a server on their loopback."""
    if refuses_open_write(request, any_origin_only=True):
        logger.warning(
            "request %s: %s %s from the page origin %s refused: open server, cross-origin write",
            request.get(REQUEST_ID, "-"),
            request.method,
            quoted(request.path),
            quoted(request.headers[hdrs.ORIGIN]),
        )
        raise ApiError(
            403,
            ApiCode.CROSS_ORIGIN_REFUSED,
            "This server has no keys and allows any origin, so pages on other sites may only read: list the page's "
            "origin in ZSYNTH_CORS_ORIGINS, set ZSYNTH_CORS_OPEN_WRITES=true, or configure keys.",
        )
    return await handler(request)


#: The speech API's HTTP routes: credentials in headers only.
HTTP_GATE: Final = Gate(
    query=None,
    insufficient_scope="Ephemeral tokens may only synthesize speech and read voices.",
    server=SPEECH_SERVER,
    foreign_token="This token is not for the speech API (an avatar session token?): mint an ephemeral token with "
    "POST /v1/tokens/ephemeral.",
    challenge=True,
)
#: The realtime sockets: a token may also come as ``?authorization=`` (browsers cannot set headers on a WebSocket).
SOCKET_GATE: Final = Gate(
    query="authorization",
    insufficient_scope=HTTP_GATE.insufficient_scope,
    server=SPEECH_SERVER,
    foreign_token=HTTP_GATE.foreign_token,
    full_key_in_query="Query parameter 'authorization' takes an ephemeral token only; send full keys in the "
    "xi-api-key header or the first message.",
)

#: Resolve the caller's credential into request[CREDENTIAL] as the route's access rule asks, or answer 401.
auth_middleware: Final = access_middleware(HTTP_GATE)


def setup_cors(app: web.Application, origins: tuple[str, ...]) -> None:
    """CORS on every route declared ``cors=True``, with the speech API's headers; call after all routes are added."""
    cors.setup_cors(app, origins, allow_headers=CORS_ALLOW_HEADERS, expose_headers=CORS_EXPOSE_HEADERS)
