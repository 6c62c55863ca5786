"""The operations routes every server has, from one table: ``GET /healthz`` (liveness), ``GET /metrics``
(Prometheus, full key only) and ``GET /openapi.json`` (the server's document, without a key).

A server adds :func:`operation_routes` to its tables with its own words, and puts its document's builder under
``app[OPENAPI_DOCUMENT]`` (this module does not import :mod:`zsynth.documents`, which reads the route tables).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

import pydantic
from aiohttp import web

from zsynth.kit.endpoints import JSON, Access, Endpoints
from zsynth.services.metrics import CONTENT_TYPE, METRICS

#: The serialized OpenAPI document of this app, built on first use (set by the app factory).
OPENAPI_DOCUMENT: Final[web.AppKey[Callable[[], bytes]]] = web.AppKey("openapi_document")


class Health(pydantic.BaseModel):
    """The process answers."""

    status: Literal["ok"]


def _response(description: str, schema: Any, media: str = JSON) -> dict[str, Any]:
    return {"description": description, "content": {media: {"schema": schema}}}


async def healthz(request: web.Request) -> web.Response:
    """The process is up and its event loop answers (never authenticated)."""
    return web.json_response({"status": "ok"})


async def serve_openapi(request: web.Request) -> web.Response:
    """The document ``app[OPENAPI_DOCUMENT]`` builds (once per process)."""
    return web.Response(body=request.app[OPENAPI_DOCUMENT](), content_type=JSON)


def operation_routes(
    *,
    cors: bool,
    liveness: str,
    metrics_summary: str,
    metrics_text: str,
    refresh: Callable[[web.Application], Awaitable[None]] | None = None,
) -> Endpoints:
    """The operations routes of a server: ``cors`` whether pages on other origins may read the probe and the
    document; ``liveness``, ``metrics_summary`` and ``metrics_text`` the server's words in the document;
    ``refresh`` brings gauges up to date before ``/metrics`` renders them."""
    routes = Endpoints()
    routes.get(
        "/healthz",
        access=Access.PUBLIC,
        cors=cors,
        operationId="healthz",
        tags=["operations"],
        summary=liveness,
        responses={"200": _response("Alive.", Health)},
    )(healthz)

    async def metrics(request: web.Request) -> web.Response:
        """Every metric of this server, in Prometheus text format."""
        if refresh is not None:
            await refresh(request.app)
        return web.Response(body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE})

    routes.get(
        "/metrics",
        access=Access.FULL,
        operationId="metrics",
        tags=["operations"],
        summary=metrics_summary,
        responses={"200": _response(metrics_text, {"type": "string"}, "text/plain")},
    )(metrics)
    routes.get(
        "/openapi.json",
        access=Access.PUBLIC,
        cors=cors,
        operationId="openapi",
        tags=["operations"],
        summary="This OpenAPI 3.1 document.",
        responses={"200": _response("The document.", {"type": "object"})},
    )(serve_openapi)
    return routes
