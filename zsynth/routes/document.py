"""``GET /openapi.json``: the OpenAPI 3.1 document of the speech API (unauthenticated, like the probes).

The app factory puts the document's builder under ``app[OPENAPI_DOCUMENT]``: this module does not import
:mod:`zsynth.openapi`, which reads the route tables.
"""

from __future__ import annotations

from ..endpoints import JSON, Access, Endpoints, serve_openapi

routes = Endpoints()


routes.get(
    "/openapi.json",
    access=Access.PUBLIC,
    cors=False,
    operationId="openapi",
    tags=["operations"],
    summary="This OpenAPI 3.1 document.",
    responses={"200": {"description": "The document.", "content": {JSON: {"schema": {"type": "object"}}}}},
)(serve_openapi)
