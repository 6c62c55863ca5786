"""The avatar server's ``GET /healthz``, ``GET /metrics`` and ``GET /openapi.json``."""

from __future__ import annotations

from typing import Final

from .avatar_common import FULL_KEY, PUBLIC, operation, responses
from .components import JSON, PathItems, Schema, json_body, ref

# The liveness answer has the speech API's shape.
SCHEMAS: Final[dict[str, Schema]] = {
    "Health": {"type": "object", "required": ["status"], "properties": {"status": {"const": "ok"}}},
}


def paths() -> PathItems:
    """The probe, the metrics and the document route."""
    text = {
        "description": "Prometheus text format (live sessions, jobs, time to first audio).",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
    document = {"description": "The document.", "content": {JSON: {"schema": {"type": "object"}}}}
    return {
        "/healthz": {
            "get": operation(
                "healthz",
                "operations",
                "Liveness: the process answers.",
                {"200": json_body("Alive.", ref("Health"))},
                PUBLIC,
            )
        },
        "/metrics": {
            "get": operation(
                "metrics", "operations", "Prometheus metrics of this avatar server.", responses({200: text}), FULL_KEY
            )
        },
        "/openapi.json": {
            "get": operation("openapi", "operations", "This OpenAPI 3.1 document.", {"200": document}, PUBLIC)
        },
    }
