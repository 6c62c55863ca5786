"""``GET /healthz``, ``GET /readyz`` and ``GET /openapi.json``: the unauthenticated routes."""

from __future__ import annotations

from typing import Final

from .components import JSON, PathItems, Schema, json_body, operation, ref

SCHEMAS: Final[dict[str, Schema]] = {
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"const": "ok"}},
    },
    "Readiness": {
        "type": "object",
        "description": "Counts only: never an address, a key or a worker id.",
        "required": ["status", "redis", "workers"],
        "properties": {
            "status": {"enum": ["ready", "not_ready"]},
            "redis": {"type": "boolean", "description": "Whether Redis answered."},
            "workers": {"type": "integer", "minimum": 0, "description": "Workers with a fresh heartbeat."},
        },
    },
}


def paths() -> PathItems:
    """The probe routes and the document route."""
    return {
        "/healthz": {
            "get": operation(
                "healthz",
                "operations",
                "Liveness: the process and its event loop answer.",
                {"200": json_body("Alive.", ref("Health"))},
                authenticated=False,
            )
        },
        "/readyz": {
            "get": operation(
                "readyz",
                "operations",
                "Readiness: Redis answers and at least one worker's heartbeat is fresh.",
                {
                    "200": json_body("Ready to synthesize.", ref("Readiness")),
                    "503": json_body("Not ready (Redis down or no live worker).", ref("Readiness")),
                },
                authenticated=False,
            )
        },
        "/openapi.json": {
            "get": operation(
                "openapi",
                "operations",
                "This OpenAPI 3.1 document.",
                {"200": {"description": "The document.", "content": {JSON: {"schema": {"type": "object"}}}}},
                authenticated=False,
            )
        },
    }
