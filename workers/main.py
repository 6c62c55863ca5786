"""Entry point of a worker process: ``zsynth worker`` or ``python -m workers``."""

from __future__ import annotations

import json
import logging
import time

from zsynth.core import protocol
from zsynth.core.config import Settings
from zsynth.core.redis_link import async_client, sync_client
from zsynth.core.runtime import run_forever
from zsynth.core.sdnotify import notify

from .engines import load_engine
from .worker import Worker

logger = logging.getLogger(__name__)


async def serve(settings: Settings) -> None:
    """Load the engine inside this process, warm it, then run the claim loop until a stop signal."""
    started = time.monotonic()
    try:
        engine = load_engine(settings)
        engine.warm_up()
    except Exception:
        logger.exception("worker %s failed to start: the %s engine did not load", settings.worker.id, settings.engine)
        raise
    logger.info("worker %s: engine %s warm in %.1fs", settings.worker.id, engine.name, time.monotonic() - started)
    redis = async_client(settings.redis.url, socket_timeout=None, health_check_interval=30)
    # The engine thread's own blocking connection for chunk events; a Redis that stops answering fails the job
    # within the timeout instead of holding the slot.
    chunk_redis = sync_client(settings.redis.url, socket_timeout=10, health_check_interval=30)
    try:
        worker = Worker(settings, engine, redis, chunk_redis)
        worker.metrics.serve()  # its own /metrics, when ZSYNTH_WORKER_METRICS_PORT is set
        worker.install_signal_handlers()
        # READY only now: the engine is loaded and warm and the heartbeat is running.
        await worker.run(on_ready=lambda: notify(f"READY=1\nSTATUS=worker {settings.worker.id} serving"))
        notify("STOPPING=1")
    finally:
        await redis.aclose()
        chunk_redis.close()
        worker.metrics.close()
    if worker.exit_code:  # a restart asked for by the worker itself (its memory): systemd starts it again
        raise SystemExit(worker.exit_code)


async def check(settings: Settings) -> bool:
    """True when this worker id's heartbeat is fresh (for ``zsynth worker --check``)."""
    redis = async_client(settings.redis.url, socket_timeout=5)
    try:
        raw = await redis.get(protocol.heartbeat_key(settings.worker.id))
    finally:
        await redis.aclose()
    if raw is None:
        return False
    status = json.loads(raw)
    return bool(time.time() - float(status.get("ts", 0)) < settings.worker.heartbeat_ttl_s)


def run(settings: Settings) -> None:
    """Blocking entry: run the worker on the servers' loop (uvloop when available)."""
    run_forever(serve(settings))
