"""Who may call which avatar route: each route declares it (:class:`zsynth.kit.endpoints.Access`), the kit's access
middleware (:mod:`zsynth.kit.gate`) enforces it with this server's words (:data:`GATE`). Full keys pass everywhere,
session tokens (minted here: their keys-table record names this server) only on the routes declared ``Access.TOKEN``
(the stream routes, the control socket included); the speech API's tokens on none. Both kinds carry the scope
``tts`` (each server's spec says so), so the record, not the scope, keeps them apart.

Full keys come in a header (``X-Api-Key`` or ``Authorization: Bearer``). Browsers cannot set headers on a
WebSocket, so a session token may also come as the ``session_token`` query parameter; a full key never does,
because URLs end up in logs and browser history.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from zsynth.avatar.errors import AvatarError
from zsynth.avatar.session import AvatarSession
from zsynth.core.codes import ApiCode
from zsynth.kit.access import refuses_open_write
from zsynth.kit.errors import Handler
from zsynth.kit.gate import Gate, access_middleware
from zsynth.services.auth import (
    AUTHENTICATOR,
    AVATAR_SERVER,
    AuthError,
    Credential,
    read_credential,
    watch_credential,
)


def auth_error(err: AuthError) -> AvatarError:
    """An auth-core refusal in this server's envelope."""
    return AvatarError(err.http_status, err.code, err.message)


def watch_session(request: web.Request, credential: Credential, session: AvatarSession) -> None:
    """End ``session`` with an ``error`` event (``code`` the auth status) once its credential expires or is revoked."""
    secret = read_credential(request, "session_token").secret
    if secret is None:
        return

    async def refused(err: AuthError) -> None:
        session.emit("error", code=err.code, message=err.message)
        session.start_close("credential_invalid")

    watcher = watch_credential(request.app[AUTHENTICATOR], secret, credential, refused)
    session.add_task(watcher, f"avatar-auth-{session.session_id}")


#: The avatar server's words for access refusals; a session token may come as ``?session_token=``.
GATE: Final = Gate(
    query="session_token",
    insufficient_scope="A session token cannot call this route; use a full API key.",
    server=AVATAR_SERVER,
    foreign_token="This token is not an avatar session token (a speech API token?): mint one with "
    "POST /v1/streaming.create_token.",
    full_key_in_query="Query parameter 'session_token' takes a session token; send full keys in a header.",
    missing_key="No API key was sent: use 'X-Api-Key: <key>' or 'Authorization: Bearer <key>'.",
)
#: Enforce the matched route's declared access rule: 401 in the envelope, or request[CREDENTIAL] set.
avatar_access_middleware: Final = access_middleware(GATE)

_OPEN_WRITE_REFUSED = (
    "This server has no keys, so pages on other sites may not drive it: list the page's origin in "
    "ZSYNTH_CORS_ORIGINS, set ZSYNTH_CORS_OPEN_WRITES=true, or configure keys."
)


@web.middleware
async def open_write_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse POST and DELETE from pages on other sites while the server has no keys (403 ``cross_origin_refused``).

    Any page a visitor opens could otherwise drive a server without keys, as on the speech API; a page whose origin
    ZSYNTH_CORS_ORIGINS lists, or ZSYNTH_CORS_OPEN_WRITES=true, lifts the refusal.
    """
    if refuses_open_write(request, any_origin_only=False):
        raise AvatarError(403, ApiCode.CROSS_ORIGIN_REFUSED, _OPEN_WRITE_REFUSED)
    return await handler(request)
