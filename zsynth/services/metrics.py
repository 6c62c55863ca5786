"""Prometheus metrics of a front process, in a registry owned by the app (never a global one).

Counters and histograms are updated where the events happen (the dispatcher, the sockets, the auth middleware);
gauges that mirror Redis state (queue depth, live and busy workers) are read at scrape time.
"""

from __future__ import annotations

import json
from collections import Counter as CountBy
from typing import Final

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from redis.asyncio import Redis

from zsynth.core import protocol

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS: Final = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0)
_DURATION_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    """Every metric one front exports."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue_depth = Gauge("zsynth_queue_depth", "Jobs waiting in the queue.", ["priority"], registry=r)
        self.workers_live = Gauge("zsynth_workers_live", "Workers with a fresh heartbeat.", registry=r)
        self.workers_busy = Gauge("zsynth_workers_busy", "Live workers running a job.", registry=r)
        self.jobs = Counter("zsynth_jobs", "Jobs submitted by this front, by outcome.", ["outcome"], registry=r)
        self.ttfa = Histogram(
            "zsynth_time_to_first_audio_seconds",
            "From job submission to its first audio chunk at the front.",
            ["priority"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.job_duration = Histogram(
            "zsynth_job_duration_seconds",
            "From job submission to its terminal event.",
            ["priority"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.slot_wait = Histogram(
            "zsynth_slot_wait_seconds",
            "How long a job waited in the queue for a worker's slot: before its first piece (part=first), or after "
            "it yielded the slot to other work (part=resumed).",
            ["priority", "part"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_resumed = Gauge(
            "zsynth_queue_resumed", "Batch jobs waiting to continue after yielding their slot.", registry=r
        )
        self.redis_pool_size = Gauge(
            "zsynth_redis_pool_size", "Connections this front's Redis pool may open.", registry=r
        )
        self.redis_pool_in_use = Gauge(
            "zsynth_redis_pool_in_use", "Connections of this front's Redis pool running a command now.", registry=r
        )
        self.redis_up = Gauge(
            "zsynth_redis_up", "1 when this front's last /metrics read of Redis answered, else 0.", registry=r
        )
        self.redis_promotions = Counter(
            "zsynth_redis_promotions", "Redis master promotions this process saw (Sentinel).", registry=r
        )
        self.audio_seconds = Counter("zsynth_audio_seconds", "Seconds of audio delivered.", registry=r)
        self.characters = Counter("zsynth_characters", "Characters of text synthesized.", registry=r)
        self.realtime_sockets = Gauge("zsynth_realtime_sockets", "Open realtime WebSockets.", registry=r)
        self.avatar_sessions = Gauge("zsynth_avatar_sessions", "Live avatar sessions.", registry=r)
        self.auth_failures = Counter("zsynth_auth_failures", "Refused credentials, by status.", ["status"], registry=r)
        self.background_restarts = Counter(
            "zsynth_background_restarts",
            "Crashes of this front's background tasks, each followed by a restart, by task.",
            ["task"],
            registry=r,
        )
        self.tls_expiry = Gauge(
            "zsynth_tls_certificate_expiry_timestamp_seconds",
            "When the TLS certificate this server presents expires (Unix time), by file; absent without TLS.",
            ["file"],
            registry=r,
        )
        self.worker_background_restarts = Gauge(
            "zsynth_worker_background_restarts",
            "Crashes of the live workers' background tasks (the heartbeat), each followed by a restart.",
            registry=r,
        )

    async def refresh_from_redis(self, redis: Redis) -> None:
        """Read the gauges that mirror shared state: queue depth by priority, live and busy workers."""
        raw_jobs = await redis.lrange(protocol.QUEUE, 0, -1)  # bounded by ZSYNTH_MAX_QUEUE
        by_priority: CountBy[str] = CountBy()
        resumed = 0
        for raw in raw_jobs:
            try:
                job = json.loads(raw)
            except ValueError:
                by_priority["unknown"] += 1
                continue
            by_priority[str(job.get("priority", "batch"))] += 1
            resumed += int(job.get("part", 0)) > 0
        for priority in ("realtime", "batch"):
            self.queue_depth.labels(priority).set(by_priority.get(priority, 0))
        self.queue_resumed.set(resumed)
        ids = protocol.worker_ids(await redis.smembers(protocol.WORKERS))
        beats = await redis.mget([protocol.heartbeat_key(i) for i in ids]) if ids else []
        live = [json.loads(b) for b in beats if b is not None]
        self.workers_live.set(len(live))
        self.workers_busy.set(sum(1 for beat in live if beat.get("state") == "busy"))
        self.worker_background_restarts.set(sum(int(beat.get("restarts") or 0) for beat in live))

    def count_restart(self, task: str) -> None:
        """A background task crashed and is being restarted (a Supervisor's ``on_restart``)."""
        self.background_restarts.labels(task).inc()

    def observe_pool(self, pool: object) -> None:
        """Mirror the Redis pool's size and use (redis-py keeps them on the pool; absent on other pool kinds)."""
        size = getattr(pool, "max_connections", None)
        in_use = getattr(pool, "_in_use_connections", None)
        if isinstance(size, int):
            self.redis_pool_size.set(size)
        if in_use is not None:
            self.redis_pool_in_use.set(len(in_use))

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)


METRICS: Final = web.AppKey("metrics", Metrics)
