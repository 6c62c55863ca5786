"""``GET /metrics``: the Prometheus text exposition of one front."""

from __future__ import annotations

from typing import Final

from .components import PathItems, Schema, operation, responses

SCHEMAS: Final[dict[str, Schema]] = {}


def paths() -> PathItems:
    """The metrics route (a full key whenever keys are configured; tokens get 403)."""
    text = {
        "description": "Prometheus text format (queue depth, workers, jobs, latencies, audio produced).",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
    return {
        "/metrics": {
            "get": operation("metrics", "operations", "Prometheus metrics of this front.", responses({200: text}))
        }
    }
