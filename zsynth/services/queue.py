"""Cleanup contexts of the services the speech front and the avatar server share: the Redis pool and the job
dispatcher (each server's app factory lists them in its ``cleanup_ctx``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from zsynth.core.redis_link import MasterWatch, async_blocking_client
from zsynth.core.supervise import Supervisor
from zsynth.services.dispatch import DISPATCHER, Dispatcher
from zsynth.services.keys import REDIS, REDIS_MASTER, SETTINGS
from zsynth.services.metrics import METRICS


async def redis_client(app: web.Application) -> AsyncIterator[None]:
    """One Redis connection pool per server; fail start-up, not the first request, when Redis is down.

    The pool blocks: with ZSYNTH_REDIS_POOL_SIZE commands in flight, the next one waits for a free connection (up to
    ZSYNTH_REDIS_POOL_TIMEOUT) rather than failing with redis-py's MaxConnectionsError.

    With a ``redis+sentinel://`` URL the pool's connections go to the master the sentinels name, and a
    :class:`MasterWatch` (``app[REDIS_MASTER]``, shown by ``/readyz`` and counted in the metrics) notices promotions.
    """
    settings = app[SETTINGS]
    # Short connect timeout: while Redis is down, requests fail fast with 503 instead of hanging.
    client = async_blocking_client(
        settings.redis.url,
        max_connections=settings.redis.pool_size,
        timeout=settings.redis.pool_timeout_s,
        health_check_interval=30,
        socket_connect_timeout=1.0,
    )
    await client.ping()
    app[REDIS] = client
    watch = MasterWatch(settings.redis.url)
    app[REDIS_MASTER] = watch
    if METRICS in app:
        metrics = app[METRICS]

        async def count(master: str) -> None:
            metrics.redis_promotions.inc()

        watch.on_promotion(count)
    watching = asyncio.create_task(watch.run(), name="redis-master-watch")
    yield
    watching.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watching
    await client.aclose()


async def dispatcher(app: web.Application) -> AsyncIterator[None]:
    """The job dispatcher and its pub/sub listener (needs ``redis_client`` before it and ``METRICS`` set)."""
    metrics = app[METRICS]
    dispatch = Dispatcher(app[SETTINGS], app[REDIS], metrics, Supervisor(on_restart=metrics.count_restart))
    await dispatch.start()
    app[DISPATCHER] = dispatch
    yield
    await dispatch.close()
