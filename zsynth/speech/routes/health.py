"""Operations routes of the speech API: the kit's ``GET /healthz``, ``GET /metrics`` and ``GET /openapi.json``
(:mod:`zsynth.kit.operations`), and readiness, ``GET /readyz`` (Redis and a worker)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from aiohttp import hdrs, web
from pydantic import BaseModel, ConfigDict, Field

from zsynth.core import protocol
from zsynth.core.ratelimit import forwarded_client
from zsynth.kit.endpoints import Access, Endpoints
from zsynth.kit.operations import operation_routes
from zsynth.services.dispatch import DISPATCHER
from zsynth.services.keys import REDIS, REDIS_MASTER, SETTINGS, VOICE_LIBRARY
from zsynth.services.metrics import METRICS
from zsynth.speech.schemas.apidoc import json_body, optional

routes = Endpoints()


async def refresh_metrics(app: web.Application) -> None:
    """Bring the Redis-backed gauges and the pool's up to date before ``/metrics`` renders them."""
    registry = app[METRICS]
    registry.observe_pool(app[REDIS].connection_pool)
    try:
        await registry.refresh_from_redis(app[REDIS])
    except Exception:  # noqa: BLE001 - the process metrics are still worth serving while Redis is down
        registry.redis_up.set(0)
    else:
        registry.redis_up.set(1)


#: /healthz, /metrics (needs a full key whenever keys are configured, see docs/operations.md) and /openapi.json;
#: the probe and the document are for tools, not pages.
operations = operation_routes(
    cors=False,
    liveness="Liveness: the process and its event loop answer.",
    metrics_summary="Prometheus metrics of this front.",
    metrics_text="Prometheus text format (queue depth, workers, jobs, latencies, audio produced).",
    refresh=refresh_metrics,
)


class Readiness(BaseModel):
    """Counts only, never a key or a worker id; the Redis master's address only to a caller on loopback."""

    model_config = ConfigDict(extra="allow")

    status: Literal["ready", "not_ready"]
    redis: bool = Field(description="Whether Redis answered.")
    workers: int = Field(ge=0, description="Workers with a fresh heartbeat.")
    streams: int = optional(ge=0, description="Streams the live workers hold open now, all together.")
    workers_full: int = optional(
        ge=0,
        description="Live workers that take no new stream now (their deadline schedule is full, or they hold their "
        "most streams): a request waits in the queue until one takes it.",
    )
    tasks_down: list[str] = optional(description="Vital background tasks that crashed and have not run again yet.")
    voice_library: str = optional(description="Why this box cannot share the voice library, when it cannot.")
    voice_library_catching_up: bool = optional(
        description="True while the start-up comparison with the bucket goes on."
    )
    redis_mode: Literal["direct", "sentinel"] = optional(
        description="How this front finds Redis: one URL, or the master that Sentinel names."
    )
    redis_master: str = optional(description="The Redis master in use (host:port), shown only to a caller on loopback.")
    redis_promotions: int = optional(ge=0, description="Redis master promotions this front has seen since it started.")


async def live_workers(app: web.Application) -> list[dict[str, Any]]:
    """The heartbeats of the registered workers whose heartbeat key is still alive."""
    redis = app[REDIS]
    ids = protocol.worker_ids(await redis.smembers(protocol.WORKERS))
    if not ids:
        return []
    beats = await redis.mget([protocol.heartbeat_key(i) for i in ids])
    live: list[dict[str, Any]] = []
    for beat in beats:
        if beat is None:
            continue
        try:
            status = json.loads(beat)
        except ValueError:
            status = {}
        live.append(status if isinstance(status, dict) else {})
    return live


@routes.get(
    "/readyz",
    access=Access.PUBLIC,
    cors=False,
    operationId="readyz",
    tags=["operations"],
    summary="Readiness: Redis answers and at least one worker's heartbeat is fresh.",
    responses={
        "200": json_body("Ready to synthesize.", Readiness),
        "503": json_body("Not ready (Redis down, no live worker, or a vital background task down).", Readiness),
    },
)
async def readyz(request: web.Request) -> web.Response:
    """Ready when Redis answers, at least one worker's heartbeat is fresh and no vital background task (the reply
    listener, the voice library's follower) is down after a crash (``tasks_down`` names them); reveals counts only.

    ``voice_library_catching_up`` is true while the start-up comparison with the bucket goes on in the background.

    ``voice_library`` says why this box cannot share the voice library when it cannot (another box on this Redis
    holds cloned voices and no bucket is set here); the box still serves its own voices, so readiness stands.

    ``redis_mode`` and ``redis_promotions`` say how Redis is found and how many failovers this front followed;
    ``redis_master`` names the master in use, for a caller on loopback only (a probe or an operator on the box; behind
    a trusted proxy, the client it names), since the route is public.
    """
    try:
        workers = await asyncio.wait_for(live_workers(request.app), 2.0)
    except Exception:
        return web.json_response({"status": "not_ready", "redis": False, "workers": 0}, status=503)
    library = request.app.get(VOICE_LIBRARY)
    down = request.app[DISPATCHER].supervisor.down() if DISPATCHER in request.app else []
    if library is not None:
        down += library.supervisor.down()
    ready = bool(workers) and not down
    body: dict[str, object] = {"status": "ready" if ready else "not_ready", "redis": True, "workers": len(workers)}
    # How full the workers are (from their heartbeats; a worker from before streams says nothing of it).
    body["streams"] = sum(int(w.get("streams") or 0) for w in workers)
    body["workers_full"] = sum(1 for w in workers if w.get("full"))
    if down:  # a vital background task crashed and has not run again yet
        body["tasks_down"] = down
    if library is not None and library.warning:  # a box on a shared Redis without the shared bucket
        body["voice_library"] = library.warning
    if library is not None and library.catching_up:
        body["voice_library_catching_up"] = True
    watch = request.app.get(REDIS_MASTER)
    if watch is not None:
        body["redis_mode"] = watch.mode
        body["redis_promotions"] = watch.promotions
        if watch.master is not None and _caller_on_loopback(request):
            body["redis_master"] = watch.master
    return web.json_response(body, status=200 if ready else 503)


def _caller_on_loopback(request: web.Request) -> bool:
    """Whether the caller itself is on this box: the client a trusted proxy (ZSYNTH_TRUSTED_PROXIES) names, as every
    per-address limit reads it, never the proxy. A request relayed by a proxy that is not trusted (it carries a
    forwarding header) is not the box's own, whatever its peer: nginx on the same box would otherwise pass for one."""
    trusted = request.app[SETTINGS].http.trusted_proxies
    forwarded = request.headers.getall(hdrs.X_FORWARDED_FOR, [])
    peer = forwarded_client(request.remote, (), ())
    if peer is None:  # a Unix socket peer, say
        return False
    if not any(peer in net for net in trusted) and (forwarded or hdrs.FORWARDED in request.headers):
        return False
    client = forwarded_client(request.remote, forwarded, trusted)
    return client is not None and client.is_loopback
