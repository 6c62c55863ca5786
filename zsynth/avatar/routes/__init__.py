"""Routes of the avatar server, one module per resource, each declared on its module's :class:`Endpoints` table.

:data:`TABLES` lists them all (the OpenAPI document reads it); :func:`setup_routes` registers them.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from zsynth.avatar.bodies import PARSING
from zsynth.avatar.routes import connect, control, manage, tokens
from zsynth.kit.endpoints import add_endpoints
from zsynth.kit.operations import operation_routes

#: /healthz, /metrics and /openapi.json: any page may read the probe and the document.
operations = operation_routes(
    cors=True,
    liveness="Liveness: the process answers.",
    metrics_summary="Prometheus metrics of this avatar server.",
    metrics_text="Prometheus text format (live sessions, jobs, time to first audio).",
)


#: Every route table of the avatar server, in registration order.
TABLES: Final = (operations, tokens.routes, connect.routes, control.routes, manage.routes)


def setup_routes(app: web.Application) -> None:
    """Register every route of the avatar server."""
    add_endpoints(app, *TABLES, parsing=PARSING)
