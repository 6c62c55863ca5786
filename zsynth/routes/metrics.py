"""``GET /metrics``: Prometheus text format. Needs a full key whenever keys are configured (see docs/operations.md)."""

from __future__ import annotations

from aiohttp import web

from ..endpoints import Access, Endpoints
from ..keys import REDIS
from ..metrics import CONTENT_TYPE, METRICS

routes = Endpoints()


@routes.get(
    "/metrics",
    access=Access.FULL,
    operationId="metrics",
    tags=["operations"],
    summary="Prometheus metrics of this front.",
    responses={
        200: {
            "description": "Prometheus text format (queue depth, workers, jobs, latencies, audio produced).",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
async def metrics(request: web.Request) -> web.Response:
    """Refresh the Redis-backed gauges and render every metric of this front."""
    registry = request.app[METRICS]
    registry.observe_pool(request.app[REDIS].connection_pool)
    try:
        await registry.refresh_from_redis(request.app[REDIS])
    except Exception:  # noqa: BLE001 - the process metrics are still worth serving while Redis is down
        pass
    return web.Response(body=registry.render(), headers={"Content-Type": CONTENT_TYPE})
