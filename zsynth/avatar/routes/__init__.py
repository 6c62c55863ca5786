"""Routes of the avatar server, one module per resource, each declared on its module's :class:`Endpoints` table.

:data:`TABLES` lists them all (the OpenAPI document reads it); :func:`setup_routes` registers them.
"""

from __future__ import annotations

from typing import Final, Literal

import pydantic
from aiohttp import web

from ...endpoints import Access, Endpoints, add_endpoints, serve_openapi
from ...metrics import CONTENT_TYPE, METRICS
from . import connect, control, manage, tokens
from .body import PARSING, documented

routes = Endpoints()


class Health(pydantic.BaseModel):
    """The liveness answer (the speech API's shape)."""

    status: Literal["ok"]


@routes.get(
    "/healthz",
    access=Access.PUBLIC,
    operationId="healthz",
    tags=["operations"],
    summary="Liveness: the process answers.",
    responses={"200": documented("Alive.", Health)},
)
async def healthz(request: web.Request) -> web.Response:
    """The process answers (never authenticated)."""
    return web.json_response({"status": "ok"})


@routes.get(
    "/metrics",
    access=Access.FULL,
    operationId="metrics",
    tags=["operations"],
    summary="Prometheus metrics of this avatar server.",
    responses={
        "200": documented(
            "Prometheus text format (live sessions, jobs, time to first audio).", {"type": "string"}, "text/plain"
        )
    },
)
async def metrics(request: web.Request) -> web.Response:
    """Prometheus metrics of this avatar server (live sessions, jobs, time to first audio); full key only."""
    return web.Response(body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE})


routes.get(
    "/openapi.json",
    access=Access.PUBLIC,
    operationId="openapi",
    tags=["operations"],
    summary="This OpenAPI 3.1 document.",
    responses={"200": documented("The document.", {"type": "object"})},
)(serve_openapi)


#: Every route table of the avatar server, in registration order.
TABLES: Final = (routes, tokens.routes, connect.routes, control.routes, manage.routes)


def setup_routes(app: web.Application) -> None:
    """Register every route of the avatar server."""
    add_endpoints(app, *TABLES, parsing=PARSING)
