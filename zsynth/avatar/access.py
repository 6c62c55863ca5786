"""Who may call which avatar route: full keys everywhere, session tokens only on the stream routes.

Full keys come in a header (``X-Api-Key`` or ``Authorization: Bearer``). Browsers cannot set headers on a
WebSocket, so a session token may also come as the ``session_token`` query parameter; a full key never does,
because URLs end up in logs and browser history.
"""

from __future__ import annotations

from aiohttp import web

from ..auth import AUTHENTICATOR, CREDENTIAL, AuthError, Credential, read_credential, watch_credential
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


async def authorize(request: web.Request, *, stream_route: bool) -> Credential:
    """Resolve the caller's credential; session tokens pass only where ``stream_route`` is true."""
    authenticator = request.app[AUTHENTICATOR]
    presented = read_credential(request, "session_token")
    try:
        credential = await authenticator.verify(presented.secret, client=request.remote)
    except AuthError as err:
        if err.status == "missing_api_key":
            raise AvatarError(
                401, "missing_api_key", "No API key was sent: use 'X-Api-Key: <key>' or 'Authorization: Bearer <key>'."
            ) from err
        raise auth_error(err) from err
    if presented.in_query and credential.kind == "full":
        raise AvatarError(
            401, "invalid_api_key", "Query parameter 'session_token' takes a session token; send full keys in a header."
        )
    if not credential.is_full and not stream_route:
        raise AvatarError(401, "insufficient_scope", "A session token cannot call this route; use a full API key.")
    request[CREDENTIAL] = credential
    return credential
