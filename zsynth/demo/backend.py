"""The demo's backend half: it holds the full key and turns it into short-lived tokens for the page.

The page never receives the full key. Per page load it gets a speech token (``POST /v1/tokens/ephemeral`` on the
speech API) and an avatar session token (``POST /v1/streaming.create_token`` on the avatar server), minted here
with the key. Cloning needs a full key, so uploads go through :meth:`DemoBackend.clone`, read here first within
the speech API's own multipart limits (:mod:`zsynth.kit.multipart`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, Final

import aiohttp
from aiohttp import hdrs, web
from yarl import URL

from zsynth.core.config import Settings
from zsynth.kit.multipart import BoundedMultipart

logger = logging.getLogger(__name__)

TOKEN_TTL_S: Final = 300
_TIMEOUT: Final = aiohttp.ClientTimeout(total=15)
_CLONE_TIMEOUT: Final = aiohttp.ClientTimeout(total=120)
_WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::", "*"})


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether a request's ``Origin`` is the demo page's own (its host and port are the request's ``Host``).

    Cloning goes through the demo's full key, so only the demo page may send it: a page on any other origin (a
    cross-site form or fetch the operator's browser is made to send) is refused. A request without ``Origin`` does not
    come from a browser's cross-origin request (browsers always send it there) and is let through.
    """
    if origin is None:
        return True
    try:
        page = URL(origin)
    except ValueError:
        return False
    if page.host is None or not host:
        return False
    expected = URL(f"{page.scheme}://{host}")
    return (page.host.lower(), page.port) == ((expected.host or "").lower(), expected.port)


class UpstreamError(Exception):
    """A call to the speech API or the avatar server failed; the message is safe to show on the page."""


def _loopback_base(settings: Settings, port: int) -> str:
    # A server bound to every interface is reached on loopback from this box.
    host = "127.0.0.1" if settings.http.host in _WILDCARD_HOSTS else settings.http.host
    if ":" in host:
        host = f"[{host}]"
    # With TLS the certificate must be valid for this host (or set ZSYNTH_DEMO_API_URL / _AVATAR_URL).
    return f"{'https' if settings.http.tls else 'http'}://{host}:{port}"


def _error_message(body: Any, status: int) -> str:
    """The human message of a speech API (``detail.message``) or avatar (``message``) error body."""
    if isinstance(body, dict):
        detail = body.get("detail")
        if isinstance(detail, dict) and isinstance(detail.get("message"), str):
            return str(detail["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return f"HTTP {status}"


async def _outcome(name: str, minting: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """A minted token, or ``{"token": None, "error": ...}`` saying why there is none."""
    try:
        return await minting
    except UpstreamError as err:
        logger.warning("demo: minting the %s token failed: %s", name, err)
        return {"token": None, "error": str(err)}


async def _or_empty(listing: Awaitable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    try:
        return await listing
    except UpstreamError as err:
        logger.warning("demo: listing avatars failed: %s", err)
        return []


class DemoBackend:
    """Mints the page's tokens with the full key and proxies cloning uploads."""

    def __init__(self, settings: Settings, http: aiohttp.ClientSession) -> None:
        self.settings = settings
        self.http = http
        keys = settings.auth.static_keys
        self._full_key: str | None = keys[0] if keys else None
        self.api_url = settings.demo.api_url or _loopback_base(settings, settings.http.port)
        self.avatar_url = settings.demo.avatar_url or _loopback_base(settings, settings.avatar.port)

    @property
    def has_key(self) -> bool:
        """A full key is configured, so the page gets tokens; without one the page calls open servers bare."""
        return self._full_key is not None

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._full_key}"} if self._full_key else {}

    def page_urls(self, page: URL) -> tuple[str, str]:
        """The API and avatar base URLs for a page opened at ``page``: the configured ones, else the page's host."""
        host = page.host or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        scheme = page.scheme or "http"
        api = self.settings.demo.api_url or f"{scheme}://{host}:{self.settings.http.port}"
        avatar = self.settings.demo.avatar_url or f"{scheme}://{host}:{self.settings.avatar.port}"
        return api, avatar

    async def _post_json(self, url: str, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            async with self.http.post(url, json=payload, headers=self._headers(), timeout=_TIMEOUT) as resp:
                body = await resp.json(content_type=None)
                if resp.status != 200 or not isinstance(body, dict):
                    raise UpstreamError(_error_message(body, resp.status))
                return body
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            raise UpstreamError(f"{url} cannot be reached ({type(err).__name__})") from err

    async def speech_token(self) -> dict[str, Any]:
        """A fresh ephemeral token for the speech API."""
        body = await self._post_json(f"{self.api_url}/v1/tokens/ephemeral", {"ttl_seconds": TOKEN_TTL_S})
        return {"token": body["token"], "expires_at": body["expires_at"]}

    async def avatar_token(self) -> dict[str, Any]:
        """A fresh session token for the avatar server."""
        body = await self._post_json(f"{self.avatar_url}/v1/streaming.create_token", {"ttl_seconds": TOKEN_TTL_S})
        data = body.get("data") or {}
        return {"token": data["token"], "expires_at": data["expires_at"]}

    async def avatars(self) -> list[dict[str, Any]]:
        """The avatars on offer (a full-key route, so the backend asks on the page's behalf)."""
        try:
            url = f"{self.avatar_url}/v1/avatars"
            async with self.http.get(url, headers=self._headers(), timeout=_TIMEOUT) as resp:
                body = await resp.json(content_type=None)
                if resp.status != 200 or not isinstance(body, dict):
                    raise UpstreamError(_error_message(body, resp.status))
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            raise UpstreamError(f"{self.avatar_url} cannot be reached ({type(err).__name__})") from err
        return [{"avatar_id": a.get("avatar_id"), "name": a.get("name")} for a in body.get("data") or []]

    async def page_session(self, page: URL) -> dict[str, Any]:
        """What one page load receives: base URLs, the avatars and its own tokens (never the full key)."""
        api_url, avatar_url = self.page_urls(page)
        session: dict[str, Any] = {"api_url": api_url, "avatar_url": avatar_url, "ttl_seconds": TOKEN_TTL_S}
        if not self.has_key:
            session["mode"] = "open"
            session["note"] = (
                "No full key is configured (ZSYNTH_API_KEY), so this page calls the servers without a token: "
                "that works while they are open (no keys configured, on loopback, as zsynth dev runs them)."
            )
            session["speech"] = {"token": None}
            session["avatar"] = {"token": None}
            session["avatars"] = await _or_empty(self.avatars())
            return session
        session["mode"] = "token"
        speech, avatar, avatars = await asyncio.gather(
            _outcome("speech", self.speech_token()), _outcome("avatar", self.avatar_token()), _or_empty(self.avatars())
        )
        session.update(speech=speech, avatar=avatar, avatars=avatars)
        return session

    async def clone(self, form: aiohttp.FormData) -> tuple[int, bytes]:
        """Forward a clone upload (read by :func:`read_clone_form`) to the speech API with the full key; its status
        and JSON body."""
        url = f"{self.api_url}/v1/voices/add"
        try:
            async with self.http.post(url, data=form, headers=self._headers(), timeout=_CLONE_TIMEOUT) as resp:
                return resp.status, await resp.read()
        except (aiohttp.ClientError, TimeoutError) as err:
            raise UpstreamError(f"{url} cannot be reached ({type(err).__name__})") from err


async def read_clone_form(request: web.Request, settings: Settings) -> aiohttp.FormData:
    """The page's clone upload, read here within the body and part limits before the full key forwards it."""
    body = BoundedMultipart(
        request, max_bytes=settings.limits.max_body_bytes, max_parts=settings.limits.max_multipart_parts
    )
    form = aiohttp.FormData(default_to_multipart=True)
    while (part := await body.next()) is not None:
        data = await body.read(part, settings.limits.max_body_bytes, body.too_large())
        if not part.name:
            continue  # a nameless part is no field of the form
        if part.filename is None:
            form.add_field(part.name, data.decode("utf-8", "replace"))
        else:
            content_type = part.headers.get(hdrs.CONTENT_TYPE, "application/octet-stream")
            form.add_field(part.name, data, filename=part.filename, content_type=content_type)
    return form


# The demo server's backend, which holds the full key and mints the page's tokens.
DEMO_BACKEND: Final = web.AppKey("demo_backend", DemoBackend)
