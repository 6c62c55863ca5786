"""One access check for every server and transport: a route's declared :class:`~zsynth.kit.endpoints.Access` rule,
checked by :func:`admit` for an HTTP request (by :func:`access_middleware`) and for a realtime socket once it has
authenticated in band, as Starlette's ``requires`` does for both.

A :class:`Gate` holds what differs between servers and transports: where a token may come in the URL and the
words of the refusals. What a refusal is (its code and HTTP status) is the same everywhere.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from zsynth.core.codes import ApiCode
from zsynth.core.logs import quoted
from zsynth.core.tracing import span
from zsynth.kit.endpoints import Access, endpoint_of
from zsynth.kit.envelope import Refusal
from zsynth.services.auth import (
    AUTHENTICATOR,
    CREDENTIAL,
    SPEECH_SCOPE,
    AuthError,
    Credential,
    Presented,
    QueryParameter,
    TokenServer,
    fingerprint,
    read_credential,
)
from zsynth.services.keys import REQUEST_ID, TRACING
from zsynth.services.metrics import METRICS

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Gate:
    """How one server or transport reads and refuses credentials."""

    #: The query parameter a token may come in (None: headers only).
    query: QueryParameter | None
    #: The message of ``insufficient_scope``: a token on a route it may not call.
    insufficient_scope: str
    #: This server: only tokens it minted (their record says so) may call its routes declared TOKEN or IN_BAND.
    server: TokenServer
    #: The message of ``insufficient_scope`` for a token minted for another server.
    foreign_token: str
    #: The message of ``invalid_api_key`` for a full key in the URL.
    full_key_in_query: str = ""
    #: The message of ``missing_api_key``, when the server words it itself (None: the auth core's).
    missing_key: str | None = None
    #: Whether an HTTP refusal carries ``WWW-Authenticate: Bearer`` (401) or ``Retry-After: 1`` (429, 503).
    challenge: bool = False


def may_call(credential: Credential, access: Access, server: TokenServer) -> bool:
    """Whether ``credential`` may call a route of ``server`` declared ``access``: a full key (or an open server)
    anything; a token of scope ``tts`` that ``server`` minted (as its record says) the routes declared TOKEN or
    IN_BAND; any other token nothing."""
    if access is Access.PUBLIC or credential.is_full:
        return True
    return access is not Access.FULL and credential.scope == SPEECH_SCOPE and credential.server == server


async def admit(request: web.Request, gate: Gate, access: Access, presented: Presented) -> Credential:
    """The credential ``presented`` resolves to, if it may call a route declared ``access``; AuthError if not.

    Refusals: the auth core's (``missing_api_key``, ``invalid_api_key``, 429, 503), ``invalid_api_key`` for a full
    key sent in the URL (URLs end up in logs), and ``insufficient_scope`` for a token the rule does not admit (or
    one minted for the other server).
    """
    authenticator = request.app[AUTHENTICATOR]
    try:
        credential = await authenticator.verify(presented.secret, client=authenticator.client_of(request))
    except AuthError as err:
        if err.code == ApiCode.MISSING_API_KEY and gate.missing_key is not None:
            raise AuthError(err.code, gate.missing_key, err.http_status) from err
        raise
    if presented.in_query and credential.kind == "full":
        raise AuthError(ApiCode.INVALID_API_KEY, gate.full_key_in_query)
    if not may_call(credential, access, gate.server):
        foreign = credential.server != gate.server
        raise AuthError("insufficient_scope", gate.foreign_token if foreign else gate.insufficient_scope)
    return credential


def required_access(request: web.Request) -> Access:
    """The access rule of the route ``request`` matched.

    A WebSocket route authenticates in band only on a WebSocket upgrade; a plain GET to it needs a credential like
    any other token route. A request no route answers (404, 405, a CORS preflight) is public: it is told so in the
    server's envelope whatever it presents, as ElevenLabs answers it; a route registered without a declaration
    gets the strictest rule.
    """
    endpoint = endpoint_of(request)
    if endpoint is not None:
        if endpoint.access is Access.IN_BAND and request.headers.get(hdrs.UPGRADE, "").lower() != "websocket":
            return Access.TOKEN
        return endpoint.access
    if request.method == hdrs.METH_OPTIONS or request.match_info.http_exception is not None:
        return Access.PUBLIC
    return Access.FULL


def _refusal(gate: Gate, err: AuthError) -> Refusal:
    headers = {}
    if gate.challenge:
        headers = {"WWW-Authenticate": "Bearer"} if err.http_status == 401 else {"Retry-After": "1"}
    return Refusal(err.http_status, err.code, err.message, headers=headers)


def access_middleware(gate: Gate) -> Middleware:
    """The middleware that enforces each route's declared access rule with :func:`admit`: a refusal in the
    server's envelope (logged, counted in ``auth_failures``), or the caller's credential in request[CREDENTIAL]."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        access = required_access(request)
        if access in (Access.PUBLIC, Access.IN_BAND):
            return await handler(request)
        presented = read_credential(request, gate.query)
        try:
            with span(request.app.get(TRACING), "auth"):
                request[CREDENTIAL] = await admit(request, gate, access, presented)
        except AuthError as err:
            if METRICS in request.app:
                request.app[METRICS].auth_failures.labels(err.code).inc()
            logger.info(
                "request %s: %s %s refused: %s (key %s)",
                request.get(REQUEST_ID, "-"),
                request.method,
                quoted(request.path),
                err.code,
                fingerprint(presented.secret) if presented.secret else "-",
            )
            raise _refusal(gate, err) from err
        return await handler(request)

    return middleware
