"""The worker: one engine, one slot shared chunk by chunk between the streams it holds, and a claim loop on Redis.

Lifecycle: load and warm the engine, recover whatever a previous life of this worker id left in its in-flight list,
start the heartbeat and the cancel listener, then serve streams until told to stop.

Serving (docs/scheduling.md): a claimed job is a :class:`~workers.stream.Stream`, recorded in the worker's in-flight
list until its terminal event is. The engine thread always computes the next chunk of the runnable stream whose
deadline comes first (:mod:`workers.scheduler`); a stream waiting for flow-control credit is parked and holds
nothing. While the engine computes, the loop claims another job (BLMOVE/LMOVE into the in-flight list) when the
worker's deadline schedule stays feasible with one more stream at its measured real-time factor and it holds fewer
than its most streams; otherwise the job stays queued for another worker. A batch stream of a full worker still
yields its place to a waiting realtime or unstarted job between pieces (see :mod:`workers.stream`).

Stopping follows the two-stage convention: the first SIGTERM/SIGINT stops claiming and lets the streams held finish
(exit 0); a second one aborts every one of them with a terminal ``error`` event to its client.

Memory: a stream whose chunk takes the worker's RSS past its ceiling ends with ``input_too_complex`` and is never
run again (see :mod:`.memory`). The worker stays up when its RSS comes back under the ceiling, and otherwise (or when
the engine does not stop in time) records that stream's end, frees its slot and exits with ``MEMORY_EXIT_CODE``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import EncodableT

from zsynth.core import protocol
from zsynth.core.audio import OutputFormatError, parse_output_format
from zsynth.core.config import Settings
from zsynth.core.engines import profile
from zsynth.core.protocol import ErrorCode
from zsynth.core.redis_link import async_client
from zsynth.core.supervise import Supervisor

from .engines import Engine, VoiceSpec
from .memory import MEMORY_EXIT_CODE, TOO_COMPLEX_MESSAGE, JobGuard, rss_bytes
from .metrics import WorkerMetrics
from .scheduler import Demand, SlotRate, feasible, load, pick
from .stream import JobLog, Stream, StreamHost
from .voice_sync import WorkerVoices

logger = logging.getLogger(__name__)

CLAIM_BLOCK_S = 1.0  # BLMOVE timeout: how often an idle worker notices a stop request
# How often the loop reads the credit lists of parked streams (and how long it waits for a job when every stream it
# holds is parked): a parked stream is a window of audio ahead of its client, so this is never heard.
PARKED_POLL_S = 0.025
# How long a worker that held more than one stream counts as shared: agents' turns come in a conversation's rhythm,
# so a worker that shared its slot a moment ago is likely to again before a sentence's rest is spoken.
SHARED_RECENT_S = 1.0
PLAYED_KEPT = 1024  # ended streams whose playback clock a following segment may continue
# Longest pause between tries while Redis is unreachable: a Sentinel promotion takes a few seconds, and a worker
# should claim again within a second of it.
MAX_BACKOFF_S = 1.0


def beat_bound_s(settings: Settings) -> float:
    """The longest one heartbeat may take before its connections are dropped: half the TTL, so that after a beat
    that timed out (the next one goes at once) a fresh one still lands within the TTL, while a beat that is only slow
    (a worker starved of CPU) has time to finish."""
    return settings.worker.heartbeat_ttl_s / 2


def heartbeat_client(settings: Settings) -> Redis:
    """The heartbeat's own client: its own connections (a connection blocked elsewhere in the worker never holds a
    beat), every connect and read bounded, and no retries (the next beat is the retry)."""
    bound = beat_bound_s(settings)
    return async_client(
        settings.redis.url, socket_connect_timeout=bound, socket_timeout=bound, retry=Retry(NoBackoff(), 0)
    )


@dataclass(frozen=True, slots=True)
class _Duplicate:
    """A claimed job another copy of which was claimed before (by ``owner``)."""

    owner: str


class Worker:
    """Serves the streams of one engine slot: claims them, schedules their chunks, records their ends."""

    def __init__(
        self, settings: Settings, engine: Engine, redis: Redis, chunk_redis: SyncRedis, beat_redis: Redis | None = None
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.redis = redis
        self.chunk_redis = chunk_redis  # blocking client, used only by the engine thread
        # The heartbeat's own client (heartbeat_client unless given; closed by run when made here).
        self._own_beat_redis = beat_redis is None
        self.beat_redis = heartbeat_client(settings) if beat_redis is None else beat_redis
        # Other workers whose heartbeat this worker's reaper found missing, and since when (monotonic): a worker is
        # reaped only when its heartbeat stays missing for longer than its TTL, over two looks at least.
        self._missing_since: dict[str, float] = {}
        self.worker_id = settings.worker.id
        self.processing = protocol.processing_key(self.worker_id)
        self.voices = WorkerVoices(settings, engine)  # the voice library: follows it, loads each job's voice
        #: The streams this worker holds, each recorded in its in-flight list until its terminal event is.
        self.streams: list[Stream] = []
        self.max_streams = settings.jobs.max_streams or profile(settings.engine).max_streams
        # Streams that lost Redis while they ran ((their queue JSON, whether they published), until settled.
        self._orphans: list[tuple[bytes, bool]] = []
        self._stopping = asyncio.Event()
        self._force = False
        self._admitting = True  # the last admission test's answer
        # Whether it holds fewer than its most streams and is not stopping: a worker whose schedule is full still takes
        # a key's first stream on it (CLAIM_NEW_OWNER_LUA); one with no room at all lets a batch stream yield instead.
        self._room = True
        self._claim_new_owner = redis.register_script(protocol.CLAIM_NEW_OWNER_LUA)
        self.rate = SlotRate()  # the slot's measured real-time factor and audio per chunk
        # Where the playback of the streams that ended last runs dry (monotonic), by job id: a segment that follows
        # one of them (Job.follows) continues its clock. Bounded: the oldest go first.
        self._played_until: OrderedDict[str, float] = OrderedDict()
        self._credit_read_at = 0.0
        self._shared_at = -SHARED_RECENT_S  # when (monotonic) it last held more than one stream
        self.jobs_done = 0
        self._reap = redis.register_script(protocol.REAP_LUA)
        # Restarts come at least every heartbeat interval: a heartbeat silent past its TTL gets this worker reaped.
        beat = settings.worker.heartbeat_interval_s
        self.supervisor = Supervisor(first_backoff_s=min(0.5, beat), max_backoff_s=beat)
        # The one engine thread: every step of every stream runs on it, one at a time (batch size 1).
        self._engine_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self.memory = JobGuard(settings, chunk_redis, self.processing)
        self.metrics = WorkerMetrics(settings, engine, lambda: self.memory.watch.ceiling, self.voices.lookups)
        self.host = StreamHost(
            settings=settings,
            engine=engine,
            chunk_redis=chunk_redis,
            metrics=self.metrics,
            memory=self.memory,
            processing=self.processing,
            voice_spec=self.voice_spec,
            # Run from the engine thread, on its blocking connection.
            should_yield=chunk_redis.register_script(protocol.SHOULD_YIELD_LUA),
            yield_slot=chunk_redis.register_script(protocol.YIELD_LUA),
            may_yield=lambda: not self._room and not self._stopping.is_set(),
            forced=lambda: self._force,
            shared=self._shared,
        )
        #: Exit status for the process once the serving loop ends (non-zero: systemd restarts the worker).
        self.exit_code = 0

    # ----- lifecycle -------------------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """First call: finish the streams held, then exit. Second call: abort them too."""
        if self._stopping.is_set():
            self._force = True
            for stream in self.streams:
                stream.abort.set()
            logger.warning("worker %s: second stop signal, aborting %d streams", self.worker_id, len(self.streams))
        else:
            logger.info("worker %s: stopping after the %d streams it holds", self.worker_id, len(self.streams))
        self._stopping.set()

    def install_signal_handlers(self) -> None:
        """Route SIGTERM and SIGINT to :meth:`request_stop` (the handler only flips flags)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)

    async def run(self, *, burst: bool = False, on_ready: Callable[[], object] | None = None) -> None:
        """Serve jobs until stopped (or, with ``burst``, until the queue is empty and every stream ended)."""
        await self.voices.start()
        await self._recover_in_flight()
        await self._beat()
        self.memory.start()
        # Supervised: a crash (a Redis error reply such as OOM or READONLY) is logged, restarted with backoff and
        # counted in the heartbeat's "restarts" (the fronts' zsynth_worker_background_restarts), with the restarts
        # of the voice library's follower.
        self.supervisor.spawn("heartbeat", self._heartbeat_loop)
        self.supervisor.spawn("reaper", self._reaper_loop)
        self.supervisor.spawn("cancel-listener", self._cancel_listener)
        if on_ready is not None:
            on_ready()
        logger.info(
            "worker %s ready: engine %s at %d Hz, at most %d streams",
            self.worker_id,
            self.engine.name,
            self.engine.sample_rate,
            self.max_streams,
        )
        try:
            await self._serve(burst)
        finally:
            self.memory.close()
            await self.supervisor.close()
            await self.voices.close()
            with contextlib.suppress(Exception):
                await self.redis.delete(protocol.heartbeat_key(self.worker_id))
            if self._own_beat_redis:
                with contextlib.suppress(Exception):
                    await self.beat_redis.aclose()
            self._engine_thread.shutdown(wait=False)
            logger.info("worker %s stopped after %d jobs", self.worker_id, self.jobs_done)

    # ----- serving: admission and the earliest deadline first ----------------------------------------------------

    async def _serve(self, burst: bool) -> None:
        """Claim and schedule until stopped (first stop: once every stream held has ended)."""
        backoff = 0.1
        while not (self._stopping.is_set() and not self.streams):
            try:
                if self._orphans:
                    await self._settle_orphans()
                await self._read_credit()
                self._assess()
                # A job waiting now is taken before the choice, so that its first chunk can be the next one made;
                # not while a stream held is still waiting for its own first chunk and due first: the job then stays
                # queued for whichever worker is free first (docs/scheduling.md, "Claims").
                if self._admitting:
                    if not self._first_chunk_due():
                        await self._claim(0.0)
                elif self._room:
                    await self._claim(0.0, new_owner_only=True)
                stream = pick(self.streams, time.monotonic(), self.settings.jobs.batch_first_audio_budget_s)
                if stream is None:
                    claimed = await self._idle(burst)
                    if burst and not claimed and not self.streams and not self._orphans:
                        return
                else:
                    await self._run_step(stream)
                backoff = 0.1
            except (RedisError, OSError) as err:  # error replies too (OOM, READONLY): retried, never fatal
                logger.warning("worker %s: redis unavailable (%s); retrying in %.1fs", self.worker_id, err, backoff)
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)

    def _assess(self) -> None:
        """Decide whether the worker takes another stream now, and publish how full it is."""
        now = time.monotonic()
        period = self.rate.chunk_audio_s
        demands = [Demand(s.deadline, period) for s in self.streams if s.runnable]
        booked = load(demands, now, self.rate)
        room = not self._stopping.is_set() and not self._orphans and len(self.streams) < self.max_streams
        # The newcomer: its first chunk due within the realtime first-audio budget, then one per chunk played.
        newcomer = Demand(now + self.settings.jobs.first_audio_budget_s, period)
        self._room = room
        if len(self.streams) > 1:
            self._shared_at = now
        self._admitting = room and feasible(demands, now, self.rate, newcomer)
        self.metrics.held(len(self.streams), self.max_streams, not self._admitting, booked)

    def _shared(self) -> bool:
        """Whether the slot is shared: this worker held another stream within :data:`SHARED_RECENT_S`, or another
        worker of the box is speaking now (only a Piper engine with a box share says: ``crowded``)."""
        if time.monotonic() - self._shared_at < SHARED_RECENT_S:
            return True
        crowded = getattr(self.engine, "crowded", None)
        return bool(crowded()) if crowded is not None else False

    def _first_chunk_due(self) -> bool:
        """Whether a stream held waits for its first chunk and is due no later than a realtime newcomer would be."""
        due = time.monotonic() + self.settings.jobs.first_audio_budget_s
        return any(s.first_sent_at is None and s.runnable and s.deadline <= due for s in self.streams)

    async def _idle(self, burst: bool) -> bool:
        """No stream may run: wait for a job (or, when the worker takes none, a moment); True when one was claimed."""
        if not self._admitting:
            if self._room and await self._claim(0.0, new_owner_only=True):
                return True
            await asyncio.sleep(PARKED_POLL_S)
            return False
        if self.streams:  # every stream is parked: come back for their credit soon
            block = PARKED_POLL_S
        else:
            block = 0.01 if burst else CLAIM_BLOCK_S
        return await self._claim(block)

    async def _run_step(self, stream: Stream) -> None:
        """Compute one chunk of ``stream`` on the engine thread."""
        loop = asyncio.get_running_loop()
        compute_s, audio_s = await loop.run_in_executor(self._engine_thread, stream.step)
        self.rate.observe(compute_s, audio_s)
        self.metrics.busy_seconds.inc(compute_s)
        if stream.finished:
            await self._end(stream)

    async def _claim(self, block: float, *, new_owner_only: bool = False) -> bool:
        """Move the next job of the queue into the in-flight list (waiting up to ``block`` seconds; with
        ``new_owner_only``, only a job of an owner none of its streams has); True when one was claimed."""
        if new_owner_only:
            owners = sorted({stream.job.owner for stream in self.streams})
            reply = await self._claim_new_owner(keys=[protocol.QUEUE, self.processing], args=owners)
        elif block > 0:
            # A bytes reply (the client decodes nothing); redis-py types it bytes or str.
            reply = await self.redis.blmove(protocol.QUEUE, self.processing, block, "RIGHT", "LEFT")  # type: ignore[arg-type]  # redis accepts float seconds
        else:
            reply = await self.redis.lmove(protocol.QUEUE, self.processing, "RIGHT", "LEFT")
        raw = cast(bytes | None, reply)
        if raw is None:
            return False
        try:
            await self._open(raw)
        except (RedisConnectionError, RedisTimeoutError, OSError) as err:
            # The job stays in our in-flight list until Redis answers again: then it is queued again (its audio
            # had not started) or ended with a clear error (_settle_orphans).
            logger.error("worker %s: redis lost while a job was claimed: %s", self.worker_id, err)
            self._orphans.append((raw, False))
        return True

    async def _open(self, raw: bytes) -> None:
        """Make a claimed job (or remainder) a stream of this worker, or drop it unrun."""
        try:
            job = protocol.Job.from_json(raw)
        except (ValueError, TypeError) as err:
            logger.error("worker %s: dropping malformed job: %s", self.worker_id, err)
            await self.redis.lrem(self.processing, 1, raw)  # type: ignore[arg-type]  # redis-py types the value str
            return
        log = JobLog(logger, {"job_id": job.job_id, "worker_id": self.worker_id})
        skip = await self._skip_reason(job)
        if isinstance(skip, _Duplicate):
            log.warning("dropped unrun, silently: a copy of this job was claimed before (by %s)", skip.owner)
            await self.redis.lrem(self.processing, 1, raw)  # type: ignore[arg-type]  # redis-py types the value str
            return
        if skip is not None:
            log.info("dropped unrun: %s", skip[1])
            self.metrics.dropped(job, skip[0])
            await self._record_terminal(job, protocol.error_event(job.seq, *skip), release=raw)
            return
        try:
            fmt = parse_output_format(job.output_format, route="convert")
        except OutputFormatError as err:
            figures = self.metrics.claimed(job)
            terminal = protocol.error_event(0, ErrorCode.INVALID_OUTPUT_FORMAT, str(err))
            self.metrics.ended(job, terminal, figures)
            terminal.meta.update(worker_id=self.worker_id, started_at=time.time(), finished_at=time.time())
            await self._record_terminal(job, terminal, release=raw)
            return
        stream = Stream(self.host, job, raw, fmt, log)
        if job.follows:
            before = next((s for s in self.streams if s.job.job_id == job.follows), None)
            if before is not None:
                stream.after = before
            elif job.follows in self._played_until:
                stream.follow(self._played_until[job.follows])
        self.streams.append(stream)
        log.info(
            "claimed (%d chars, part %d, voice %s, %s; %d streams held)",
            len(job.text),
            job.part,
            job.voice_id,
            job.output_format,
            len(self.streams),
        )
        if self._force:
            stream.abort.set()

    async def _end(self, stream: Stream) -> None:
        """Record the end of a stream whose work ended: its terminal event, or the job claimed in its place."""
        self.streams.remove(stream)
        played_until = stream.dry_at if stream.first_sent_at is not None else None
        for follower in self.streams:
            if follower.after is stream:
                follower.follow(played_until)
        if played_until is not None:
            self._played_until[stream.job.job_id] = played_until
            while len(self._played_until) > PLAYED_KEPT:
                self._played_until.popitem(last=False)
        if not stream.owned:  # the memory guard recorded its end and is restarting the process
            return
        job, log = stream.job, stream.log
        if isinstance(stream.error, (RedisConnectionError, RedisTimeoutError)):
            # Redis went away mid-job (redis-py wraps socket errors in these; a bare OSError comes from the engine,
            # e.g. a missing file, and fails the job): settled once Redis answers again. Every other stream this
            # worker holds is settled the same way, as the one job a worker held was: whatever they published meanwhile
            # may be lost, and their listeners ran dry while Redis was away.
            log.error("redis lost during the job: %s", stream.error)
            self._orphans.append((stream.raw, stream.published))
            await self._orphan_all()
            return
        terminal = stream.ending()
        self.metrics.ended(job, terminal, stream.figures, memory_over=stream.memory_over)
        if terminal is None:
            log.info("yielded its slot after chunk #%d; the rest waits in the queue", stream.seq - 1)
            if stream.handed_to is not None:
                try:
                    await self._open(stream.handed_to)
                except (RedisConnectionError, RedisTimeoutError, OSError) as err:
                    logger.error("worker %s: redis lost while a job was claimed: %s", self.worker_id, err)
                    self._orphans.append((stream.handed_to, False))
            return
        terminal.meta.update(worker_id=self.worker_id, started_at=stream.started, finished_at=time.time())
        try:
            await self._record_terminal(job, terminal, release=stream.raw)
        except (RedisConnectionError, RedisTimeoutError, OSError) as err:
            log.error("redis lost while the job's end was recorded: %s", err)
            self._orphans.append((stream.raw, True))
            return
        self.jobs_done += 1
        log.info(
            "%s in %.3fs (peak RSS %d MB)", terminal.kind, time.time() - stream.started, self.memory.watch.peak // 10**6
        )
        if stream.memory_over:
            await self._shed_memory(log)

    async def _orphan_all(self) -> None:
        """Redis was lost: close every stream held (on the engine thread) and settle each once Redis answers."""
        loop = asyncio.get_running_loop()
        for stream in list(self.streams):
            self.streams.remove(stream)
            with contextlib.suppress(Exception):
                await loop.run_in_executor(self._engine_thread, stream.close)
            stream.log.error("redis lost while the worker held the job")
            self._orphans.append((stream.raw, stream.published))

    async def _read_credit(self) -> None:
        """Read the credit lists of the parked streams (every PARKED_POLL_S at most): a grant lets a stream run
        again, a cancel aborts it, and a front that took nothing for the flow wait, or is gone, ends it."""
        parked = [s for s in self.streams if s.parked and not s.abort.is_set() and not s.gate.stalled]
        now = time.monotonic()
        if not parked or now - self._credit_read_at < PARKED_POLL_S:
            return
        self._credit_read_at = now
        looks = [s for s in parked if s.gate.wants_look(now)]
        async with self.redis.pipeline(transaction=False) as pipe:
            for stream in parked:
                pipe.lpop(stream.gate.key, 64)
            for stream in looks:
                pipe.pubsub_numsub(stream.job.reply_to)
            replies = await pipe.execute()
        now = time.monotonic()
        for stream, entries in zip(parked, replies[: len(parked)], strict=True):
            if not stream.gate.take(list(entries or []), now):
                stream.abort.set()  # its front cancelled it
        for stream, listeners in zip(looks, replies[len(parked) :], strict=True):
            stream.gate.looked(bool(listeners and int(listeners[0][1]) > 0), now)
        for stream in parked:
            if stream.credit_arrived():
                stream.parked = False
            else:
                stream.gate.given_up(now)  # sets gate.stalled: the stream runs once more, to end

    async def _settle_orphans(self) -> None:
        """Settle the streams that lost Redis while they ran, once Redis answers (raises while it does not).

        A job that had published nothing and is not marked started goes back to the head of the queue, to be run
        once; any other ends with ``redis_failover`` (its client may have heard part of it: never again).
        """
        while self._orphans:
            raw, published = self._orphans[0]
            job = protocol.Job.from_json(raw)
            log = JobLog(logger, {"job_id": job.job_id, "worker_id": self.worker_id})
            key = protocol.job_key(job.job_id)
            started = job.resumed or published or bool(await self.redis.hexists(key, protocol.STARTED_FIELD))
            if not started:
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.lrem(self.processing, 1, raw)  # type: ignore[arg-type]  # redis-py types the value str
                    pipe.hdel(key, protocol.OWNER_FIELD)  # unowned again: the next worker to claim it runs it
                    pipe.rpush(protocol.QUEUE, raw)  # the end workers claim from: it goes first
                    await pipe.execute()
                log.warning("queued again: redis was lost before its audio started")
            else:
                error = protocol.error_event(
                    protocol.ANY_SEQ,
                    ErrorCode.REDIS_FAILOVER,
                    "Redis failed over while this job was speaking; part of its audio was lost. Retry the request.",
                )
                await self._record_terminal(job, error, release=raw)
                log.warning("failed: redis was lost after its audio started")
            self._orphans.pop(0)

    async def _recover_in_flight(self) -> None:
        """Fail the jobs a previous life of this worker id left claimed but unfinished."""
        leftovers = await self.redis.lrange(self.processing, 0, -1)
        for raw in leftovers:
            with contextlib.suppress(ValueError, TypeError):
                job = protocol.Job.from_json(raw)
                if await self.redis.hexists(protocol.job_key(job.job_id), protocol.MEMORY_FIELD):
                    error = protocol.error_event(job.seq, ErrorCode.INPUT_TOO_COMPLEX, TOO_COMPLEX_MESSAGE)
                else:
                    error = protocol.error_event(
                        job.seq, ErrorCode.WORKER_RESTARTED, "The worker restarted during this job."
                    )
                await self._record_terminal(job, error, release=raw)
        if leftovers:
            await self.redis.delete(self.processing)
            logger.warning("worker %s: failed %d jobs left from a previous run", self.worker_id, len(leftovers))

    # ----- heartbeat and cancellation --------------------------------------------------------------------------

    async def _beat(self) -> None:
        streams = list(self.streams)
        status = {
            "worker_id": self.worker_id,
            "engine": self.engine.name,
            "pid": os.getpid(),
            "state": "busy" if streams else "idle",
            "job_id": streams[0].job.job_id if streams else None,  # the oldest stream held
            # How full it is (the fronts' /readyz and zsynth_worker_streams): the streams held, its bound, and
            # whether it takes another now.
            "streams": len(streams),
            "max_streams": self.max_streams,
            "full": not self._admitting,
            "ts": time.time(),
            "restarts": self.supervisor.restarts + self.voices.library.supervisor.restarts,
            "rss": rss_bytes(),
            "max_rss": self.memory.watch.ceiling,
        }
        # Bounded: a connection that stopped answering (a Redis restart or failover can leave one) is dropped when
        # the time is up, and the next beat opens a fresh one, long before the TTL runs out.
        async with asyncio.timeout(beat_bound_s(self.settings)), self.beat_redis.pipeline(transaction=False) as pipe:
            pipe.set(
                protocol.heartbeat_key(self.worker_id), json.dumps(status), ex=self.settings.worker.heartbeat_ttl_s
            )
            pipe.sadd(protocol.WORKERS, self.worker_id)
            await pipe.execute()

    async def _heartbeat_loop(self) -> None:
        """Beat every heartbeat interval, on the heartbeat's own connections; nothing else runs in this loop."""
        pause = self.settings.worker.heartbeat_interval_s
        while True:
            await asyncio.sleep(pause)
            pause = self.settings.worker.heartbeat_interval_s
            try:
                await self._beat()
            except TimeoutError:
                logger.warning(
                    "worker %s: heartbeat took over %.1f s; its connections are dropped and it beats again now",
                    self.worker_id,
                    beat_bound_s(self.settings),
                )
                await self._drop_beat_connections()
                pause = 0.0  # the time is already spent: the next beat goes at once, on a fresh connection
            except (RedisConnectionError, RedisTimeoutError, OSError) as err:
                logger.warning("worker %s: heartbeat failed: %s", self.worker_id, err)
                await self._drop_beat_connections()

    async def _drop_beat_connections(self) -> None:
        """Close the heartbeat's connections, so that the next beat connects afresh (bounded in time too)."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(beat_bound_s(self.settings)):
                await self.beat_redis.connection_pool.disconnect()

    async def _reaper_loop(self) -> None:
        """Look for dead workers every heartbeat interval (apart from the heartbeat: a slow look never delays it)."""
        while True:
            await asyncio.sleep(self.settings.worker.heartbeat_interval_s)
            try:
                await self.reap_dead_workers()
            except (RedisConnectionError, RedisTimeoutError, OSError) as err:
                logger.warning("worker %s: reaper failed to look: %s", self.worker_id, err)

    def _long_missing(self, others: list[str], beats: list[Any]) -> list[str]:
        """Of ``others``, those whose heartbeat was missing at this look and at an earlier one over a TTL ago.

        One missed read (a beat late by a moment, a key read between expiry and a refresh) never reaps a live
        worker: its heartbeat must stay missing for longer than its own TTL.
        """
        now = time.monotonic()
        missing = {worker_id for worker_id, beat in zip(others, beats, strict=True) if beat is None}
        self._missing_since = {w: self._missing_since.get(w, now) for w in missing}
        return [
            w for w in others if w in missing and now - self._missing_since[w] >= self.settings.worker.heartbeat_ttl_s
        ]

    async def reap_dead_workers(self) -> int:
        """Recover the in-flight jobs of workers whose heartbeat expired over a TTL ago; return how many jobs were
        failed.

        A job whose audio had not started is queued again (once); one whose audio had started is failed with
        ``worker_died``, since speaking it again would repeat audio to its client.
        """
        others = [w for w in protocol.worker_ids(await self.redis.smembers(protocol.WORKERS)) if w != self.worker_id]
        if not others:
            return 0
        beats = await self.redis.mget([protocol.heartbeat_key(w) for w in others])
        failed_total = 0
        for worker_id in self._long_missing(others, beats):
            self._missing_since.pop(worker_id, None)
            failed, requeued = await self._reap(
                keys=[
                    protocol.processing_key(worker_id),
                    protocol.heartbeat_key(worker_id),
                    protocol.QUEUE,
                    protocol.WORKERS,
                ],
                args=[
                    protocol.JOB_KEY_PREFIX,
                    protocol.STARTED_FIELD,
                    protocol.MAX_ATTEMPTS,
                    worker_id,
                    protocol.MEMORY_FIELD,
                    protocol.OWNER_FIELD,
                ],
            )
            for job_id in requeued:
                JobLog(logger, {"job_id": bytes(job_id).decode(), "worker_id": worker_id}).warning(
                    "queued again: its worker died before its audio started"
                )
            for raw in failed:
                job = protocol.Job.from_json(raw)
                log = JobLog(logger, {"job_id": job.job_id, "worker_id": worker_id})
                if await self.redis.hexists(protocol.job_key(job.job_id), protocol.MEMORY_FIELD):
                    error = protocol.error_event(protocol.ANY_SEQ, ErrorCode.INPUT_TOO_COMPLEX, TOO_COMPLEX_MESSAGE)
                    log.warning("failed: its worker died after it passed the memory ceiling (not run again)")
                else:
                    error = protocol.error_event(
                        protocol.ANY_SEQ, ErrorCode.WORKER_DIED, "The worker died while speaking."
                    )
                    log.warning("failed: its worker died")
                await self._record_terminal(job, error)
            failed_total += len(failed)
            logger.info("worker %s reaped dead worker %s", self.worker_id, worker_id)
        return failed_total

    async def _cancel_listener(self) -> None:
        """Stop the stream of each job id published on the cancel channel (a cancel or barge-in stops one stream)."""
        while True:
            try:
                pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
                await pubsub.subscribe(protocol.CANCEL_CHANNEL)
                async for message in pubsub.listen():
                    data = message.get("data")
                    if not isinstance(data, bytes):
                        continue
                    job_id = data.decode()
                    for stream in self.streams:
                        if stream.job.job_id == job_id:
                            stream.log.info("cancelled")
                            stream.abort.set()
            except (RedisConnectionError, RedisTimeoutError, OSError) as err:
                logger.warning("worker %s: cancel listener lost redis: %s", self.worker_id, err)
                await asyncio.sleep(1.0)

    # ----- one claimed job -------------------------------------------------------------------------------------

    async def _skip_reason(self, job: protocol.Job) -> tuple[ErrorCode, str] | None | _Duplicate:
        """Why a claimed job is dropped unrun, or None to run it (this worker now owns it).

        A job that is not a remainder is claimed first (HSETNX of its ``owner`` field): a copy whose owner is set
        already is a duplicate (a push that Redis ran twice, say when a failover cut the reply and the client sent
        it again) and is dropped without a word, since its terminal event would end the running copy's stream.
        """
        key = protocol.job_key(job.job_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.exists(protocol.cancel_key(job.job_id))
            pipe.hexists(key, protocol.MEMORY_FIELD)
            if not job.resumed:  # a remainder's owner is the worker that ran its first part
                pipe.hsetnx(key, protocol.OWNER_FIELD, self.worker_id)
                pipe.hget(key, protocol.OWNER_FIELD)
                pipe.expire(key, self.settings.jobs.ttl_s)
            cancelled, poison, *claim = await pipe.execute()
        if claim and not claim[0]:
            owner = claim[1].decode() if isinstance(claim[1], bytes) else str(claim[1])
            if owner == protocol.RESUBMITTED:  # its front queued it again under a new id: this id has no listener
                return ErrorCode.CANCELLED, "Its front queued it again after a Redis failover."
            return _Duplicate(owner)
        # A remainder has started: its client is listening for the rest, whatever the start deadline said.
        if not job.resumed and job.start_deadline and time.time() > job.start_deadline:
            return ErrorCode.DEADLINE_EXCEEDED, "The job waited in the queue past its deadline."
        if poison:  # e.g. the remainder of a job that passed the memory ceiling: never run again
            return ErrorCode.INPUT_TOO_COMPLEX, TOO_COMPLEX_MESSAGE
        if cancelled:
            return ErrorCode.CANCELLED, "The client went away before the job started."
        return None

    # ----- the memory ceiling ----------------------------------------------------------------------------------

    async def _shed_memory(self, log: logging.LoggerAdapter[logging.Logger]) -> None:
        """After a stream stopped for memory: give the engine's caches back; restart if the RSS stays over."""
        release = getattr(self.engine, "release_memory", None)
        if callable(release):
            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(self._engine_thread, release)
        rss = rss_bytes() or 0
        if rss > self.memory.watch.ceiling:
            log.error("RSS still %d MB after the job: restarting the worker", rss // 10**6)
            self.exit_code = MEMORY_EXIT_CODE
            self._stopping.set()
        else:
            log.info("RSS back to %d MB: serving on", rss // 10**6)

    def voice_spec(self, voice_id: str) -> VoiceSpec:
        """The job's voice as the engine needs it (a clone fetched from the library if missing, or refused)."""
        return self.voices.spec(voice_id)

    async def _record_terminal(
        self, job: protocol.Job, terminal: protocol.Event, release: bytes | str | None = None
    ) -> None:
        """Publish the terminal event, record it, and (with ``release``) free the in-flight slot, atomically."""
        state: dict[EncodableT, EncodableT] = {
            "state": terminal.kind,
            protocol.SEQ_FIELD: str(terminal.seq),  # the front compares it with the events it got (lost_events)
            **{k: str(v) for k, v in terminal.meta.items()},
        }
        terminal.job_id = job.job_id
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.publish(job.reply_to, terminal.encode())
            pipe.hset(protocol.job_key(job.job_id), mapping=state)
            pipe.expire(protocol.job_key(job.job_id), self.settings.jobs.ttl_s)
            if release is not None:
                pipe.lrem(self.processing, 1, release)  # type: ignore[arg-type]  # redis-py types the value str
            await pipe.execute()
