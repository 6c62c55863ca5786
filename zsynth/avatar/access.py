"""Who may call which avatar route: each route declares it (:class:`zsynth.endpoints.Access`), the middleware
here enforces it. Full keys pass everywhere, session tokens only on the routes declared ``Access.TOKEN`` (the stream
routes).

Full keys come in a header (``X-Api-Key`` or ``Authorization: Bearer``). Browsers cannot set headers on a
WebSocket, so a session token may also come as the ``session_token`` query parameter; a full key never does,
because URLs end up in logs and browser history.
"""

from __future__ import annotations

from aiohttp import hdrs, web

from ..access import refuses_open_write
from ..auth import AUTHENTICATOR, CREDENTIAL, AuthError, Credential, read_credential, watch_credential
from ..endpoints import Access, endpoint_of
from ..errors import Handler
from .errors import AvatarError
from .session import AvatarSession


def auth_error(err: AuthError) -> AvatarError:
    """An auth-core refusal in this server's envelope."""
    return AvatarError(err.http_status, err.status, err.message)


def watch_session(request: web.Request, credential: Credential, session: AvatarSession) -> None:
    """End ``session`` with an ``error`` event (``code`` the auth status) once its credential expires or is revoked."""
    secret = read_credential(request, "session_token").secret
    if secret is None:
        return

    async def refused(err: AuthError) -> None:
        session.emit("error", code=err.status, message=err.message)
        session.start_close("credential_invalid")

    watcher = watch_credential(request.app[AUTHENTICATOR], secret, credential, refused)
    session.add_task(watcher, f"avatar-auth-{session.session_id}")


_MISSING_KEY = "No API key was sent: use 'X-Api-Key: <key>' or 'Authorization: Bearer <key>'."
_OPEN_WRITE_REFUSED = (
    "This server has no keys, so pages on other sites may not drive it: list the page's origin in "
    "ZSYNTH_CORS_ORIGINS, set ZSYNTH_CORS_OPEN_WRITES=true, or configure keys."
)


async def authorize(request: web.Request, access: Access) -> Credential:
    """Resolve the caller's credential for a route declared ``access`` (TOKEN or FULL) into request[CREDENTIAL]."""
    authenticator = request.app[AUTHENTICATOR]
    presented = read_credential(request, "session_token")
    try:
        credential = await authenticator.verify(presented.secret, client=authenticator.client_of(request))
    except AuthError as err:
        if err.status == "missing_api_key":
            raise AvatarError(401, "missing_api_key", _MISSING_KEY) from err
        raise auth_error(err) from err
    if presented.in_query and credential.kind == "full":
        raise AvatarError(
            401, "invalid_api_key", "Query parameter 'session_token' takes a session token; send full keys in a header."
        )
    if not credential.is_full and access is not Access.TOKEN:
        raise AvatarError(401, "insufficient_scope", "A session token cannot call this route; use a full API key.")
    request[CREDENTIAL] = credential
    return credential


def _access(request: web.Request) -> Access:
    endpoint = endpoint_of(request)
    if endpoint is not None:
        return endpoint.access
    if request.method == hdrs.METH_OPTIONS or request.match_info.http_exception is not None:
        # CORS preflights (aiohttp-cors's routes) and 404/405 answers carry nothing to protect.
        return Access.PUBLIC
    return Access.FULL  # a route registered without a declaration: the strictest rule


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Enforce the matched route's declared access rule: 401 in the envelope, or request[CREDENTIAL] set."""
    access = _access(request)
    if access in (Access.TOKEN, Access.FULL):
        await authorize(request, access)
    return await handler(request)


@web.middleware
async def open_write_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse POST and DELETE from pages on other sites while the server has no keys (403 ``cross_origin_refused``).

    Any page a visitor opens could otherwise drive a server without keys, as on the speech API; a page whose origin
    ZSYNTH_CORS_ORIGINS lists, or ZSYNTH_CORS_OPEN_WRITES=true, lifts the refusal.
    """
    if refuses_open_write(request, any_origin_only=False):
        raise AvatarError(403, "cross_origin_refused", _OPEN_WRITE_REFUSED)
    return await handler(request)
