"""The host allow-list: which names a request's ``Host`` may carry, and which pages may open a WebSocket on a server
without keys.

DNS rebinding: a page on ``attacker.example`` re-points its own name at 127.0.0.1 and then calls "itself". Its
requests reach a server on the victim's loopback with ``Host: attacker.example`` and ``Origin:
http://attacker.example``, so a check that compares ``Origin`` with ``Host`` passes. A server without keys, and the
demo (which holds a full key), therefore answer only requests whose ``Host`` is ``localhost``, an IP address, the
bound address, the host of ZSYNTH_DEMO_API_URL or ZSYNTH_DEMO_AVATAR_URL, or a name listed in ZSYNTH_ALLOWED_HOSTS;
other names get 421 ``host_not_allowed``. An IP address cannot be rebound (a page on ``http://10.0.0.5`` reaches only
10.0.0.5), so it is let through as go-ethereum's ``--http.vhosts`` does: a box reached by its address (a health
probe, a LAN client) needs no setting. With keys the credential is the protection, so the list applies only when
ZSYNTH_ALLOWED_HOSTS is set. A request without ``Host`` (HTTP/1.0) is not a browser's.

Browsers do not apply CORS to WebSockets, so on a server without keys an upgrade whose ``Origin`` is another site's
(not an allowed host, not listed in ZSYNTH_CORS_ORIGINS) is refused with 403 ``cross_origin_refused``, as the
cross-site write guard refuses writes; ZSYNTH_CORS_OPEN_WRITES=true lifts both.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from typing import Final

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware
from yarl import URL

from zsynth.core.codes import ApiCode
from zsynth.core.config import Settings
from zsynth.core.logs import quoted
from zsynth.kit.envelope import Refusal
from zsynth.services.auth import AUTHENTICATOR
from zsynth.services.keys import REQUEST_ID

logger = logging.getLogger(__name__)

_WILDCARD_BINDS: Final = frozenset({"", "0.0.0.0", "::", "*"})
_HOST_REFUSED: Final = (
    "This server does not answer to the host name this request was sent to. If it is this server's own name, add it "
    "to ZSYNTH_ALLOWED_HOSTS."
)
_WS_REFUSED: Final = (
    "This server has no keys, so pages on other sites may not open its WebSockets: list the page's origin in "
    "ZSYNTH_CORS_ORIGINS, set ZSYNTH_CORS_OPEN_WRITES=true, or configure keys."
)


def host_name(authority: str) -> str | None:
    """The host of a ``Host`` header or URL authority (``name:port``, ``[v6]:port``): lower case, without the port,
    the brackets or a trailing dot; None when it is not one."""
    try:
        host = URL.build(scheme="http", authority=authority.strip()).host
    except (TypeError, ValueError):
        return None
    return host.lower().rstrip(".") if host else None


def is_loopback_name(name: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def cannot_be_rebound(name: str) -> bool:
    """``localhost`` (browsers resolve it to loopback themselves) or an IP address: no DNS answer re-points it."""
    if name == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """The names a server answers to besides ``localhost`` and IP addresses."""

    names: frozenset[str]
    any_host: bool  # ZSYNTH_ALLOWED_HOSTS lists "*"
    configured: bool  # ZSYNTH_ALLOWED_HOSTS is set: the list applies to servers with keys too

    @classmethod
    def from_settings(cls, settings: Settings) -> AllowedHosts:
        """The allowed names of ``settings``: ZSYNTH_ALLOWED_HOSTS, the bound address and the demo's base URLs."""
        listed = [host_name(item) for item in settings.http.allowed_hosts if item != "*"]
        urls = [URL(url).host for url in (settings.demo.api_url, settings.demo.avatar_url) if url]
        bind = settings.http.host
        bound = [] if bind in _WILDCARD_BINDS else [host_name(bind) or host_name(f"[{bind}]")]  # an IPv6 bind
        names = frozenset(name.lower().rstrip(".") for name in (*listed, *urls, *bound) if name)
        return cls(names, "*" in settings.http.allowed_hosts, bool(settings.http.allowed_hosts))

    def admits(self, name: str | None) -> bool:
        """Whether a request for host ``name`` is answered."""
        return self.any_host or (name is not None and (name in self.names or cannot_be_rebound(name)))

    def admits_origin(self, origin: str) -> bool:
        """Whether a page on ``origin`` (an ``Origin`` header) is on a loopback name or a named host (any IP address
        is not enough here: a page served from the attacker's own address is another site; nor is ``*``, which turns
        off the ``Host`` check only)."""
        try:
            name = URL(origin).host
        except ValueError:
            return False
        name = name.lower().rstrip(".") if name else None
        return name is not None and (name in self.names or is_loopback_name(name))


def _is_open(app: web.Application) -> bool:
    return AUTHENTICATOR in app and app[AUTHENTICATOR].is_open


def foreign_socket_origin(request: web.Request, settings: Settings, hosts: AllowedHosts) -> bool:
    """A WebSocket upgrade sent by a page on another site: its ``Origin`` is neither on an allowed host nor listed in
    ZSYNTH_CORS_ORIGINS (and ZSYNTH_CORS_OPEN_WRITES is off)."""
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None or request.headers.get(hdrs.UPGRADE, "").lower() != "websocket":
        return False
    return not (settings.http.cors_open_writes or origin in settings.http.cors_origins or hosts.admits_origin(origin))


def host_guard(settings: Settings, *, always: bool = False) -> Middleware:
    """The middleware enforcing the allow-list of ``settings`` (on a server without keys, with ZSYNTH_ALLOWED_HOSTS
    set, or ``always``: the demo) and, on a server without keys, the WebSocket origin check; place it after the
    error middleware, whose envelope answers its refusals."""
    hosts = AllowedHosts.from_settings(settings)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        is_open = _is_open(request.app)
        host = request.headers.get(hdrs.HOST)
        if (always or is_open or hosts.configured) and host is not None and not hosts.admits(host_name(host)):
            logger.info(
                "request %s: %s %s refused: host %s is not allowed",
                request.get(REQUEST_ID, "-"),
                request.method,
                quoted(request.path),
                quoted(host, 100),
            )
            raise Refusal(421, ApiCode.HOST_NOT_ALLOWED, _HOST_REFUSED)
        if is_open and foreign_socket_origin(request, settings, hosts):
            logger.info(
                "request %s: WebSocket from the page origin %s refused: open server, another site",
                request.get(REQUEST_ID, "-"),
                quoted(request.headers[hdrs.ORIGIN]),
            )
            raise Refusal(403, ApiCode.CROSS_ORIGIN_REFUSED, _WS_REFUSED)
        return await handler(request)

    return guard
