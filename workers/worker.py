"""The worker: one engine, one slot, a claim loop on Redis, and events published as audio is made.

Lifecycle: load and warm the engine, recover whatever a previous life of this worker id left in its in-flight list,
start the heartbeat and the cancel listener, then claim jobs one at a time with BLMOVE until told to stop.

A batch job is spoken one piece (whole sentences, at most ZSYNTH_PIECE_MAX_CHARS) at a time. After each piece
but the last, one Redis command asks whether the next job in the queue is realtime or has not started; if so the
worker yields: it flushes its encoder, puts the rest of the job back in the queue (it continues, on this worker
or another, with the next sequence number and sample offset) and claims the waiting job in the same atomic step.

Stopping follows the two-stage convention: the first SIGTERM/SIGINT stops claiming and lets the running job finish
(exit 0); a second one aborts the running job with a terminal ``error`` event to its client.

Memory: a job that takes the worker's RSS past its ceiling ends with ``input_too_complex`` and is never run again
(see :mod:`.memory`). The worker stays up when its RSS comes back under the ceiling, and otherwise (or when the
engine does not stop in time) records the job's end, frees its slot and exits with ``MEMORY_EXIT_CODE``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
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
from zsynth.core.audio import Encoder, OutputFormat, OutputFormatError, parse_output_format
from zsynth.core.config import Settings
from zsynth.core.engines import profile
from zsynth.core.protocol import ErrorCode
from zsynth.core.redis_link import async_client
from zsynth.core.supervise import Supervisor

from .engines import Engine, EngineChunk, VoiceSpec
from .flow import CreditGate
from .memory import MEMORY_EXIT_CODE, TOO_COMPLEX_MESSAGE, JobGuard, rss_bytes
from .metrics import WorkerMetrics
from .synthesis import YIELDING_CODECS, ChunkMeta, first_piece, speak_cut, text_pieces
from .voice_sync import VoiceUnavailable, WorkerVoices

logger = logging.getLogger(__name__)

CLAIM_BLOCK_S = 1.0  # BLMOVE timeout: how often an idle worker notices a stop request
# Longest pause between tries while Redis is unreachable: a Sentinel promotion takes a few seconds, and a worker
# should claim again within a second of it.
MAX_BACKOFF_S = 1.0


def beat_bound_s(settings: Settings) -> float:
    """The longest one heartbeat may take before its connections are dropped: half the TTL, so that after a beat
    that timed out (the next one goes at once) a fresh one still lands within the TTL, while a beat that is only slow
    (a worker starved of CPU) has time to finish."""
    return settings.heartbeat_ttl_s / 2


def heartbeat_client(settings: Settings) -> Redis:
    """The heartbeat's own client: its own connections (a connection blocked elsewhere in the worker never holds a
    beat), every connect and read bounded, and no retries (the next beat is the retry)."""
    bound = beat_bound_s(settings)
    return async_client(
        settings.redis_url, socket_connect_timeout=bound, socket_timeout=bound, retry=Retry(NoBackoff(), 0)
    )


class JobLog(logging.LoggerAdapter[logging.Logger]):
    """Prefixes every line with the job id and the worker id."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        assert self.extra is not None
        kwargs["extra"] = {**self.extra, **kwargs.get("extra", {})}  # JSON logs carry the ids as fields
        return f"[job {self.extra['job_id']} worker {self.extra['worker_id']}] {msg}", kwargs


@dataclass(frozen=True, slots=True)
class _Duplicate:
    """A claimed job another copy of which was claimed before (by ``owner``)."""

    owner: str


@dataclass(slots=True)
class _Progress:
    """What the engine thread has published of the running job: the next sequence number and the samples sent."""

    seq: int = 0
    samples: int = 0
    # Set when the job yielded its slot: the JSON of the job claimed in its place (already in our in-flight list).
    handed_to: bytes | None = None
    yielded: bool = False
    gate: CreditGate | None = None  # the job's flow-control credit (workers/flow.py)
    too_long: bool = False  # stopped at the hard bound on audio per job


class Worker:
    """Runs the claim loop for one engine slot."""

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
        self.worker_id = settings.worker_id
        self.processing = protocol.processing_key(self.worker_id)
        self.voices = WorkerVoices(settings, engine)  # the voice library: follows it, loads each job's voice
        self.current: protocol.Job | None = None
        # The job (its queue JSON) that lost Redis while it ran, and what it had published, until it is settled.
        self._orphan: tuple[bytes, _Progress | None] | None = None
        self._progress: _Progress | None = None
        self._abort = threading.Event()  # read by the engine thread between chunks
        self._stopping = asyncio.Event()
        self._force = False
        self.jobs_done = 0
        self._reap = redis.register_script(protocol.REAP_LUA)
        # Restarts come at least every heartbeat interval: a heartbeat silent past its TTL gets this worker reaped.
        beat = settings.heartbeat_interval_s
        self.supervisor = Supervisor(first_backoff_s=min(0.5, beat), max_backoff_s=beat)
        # Run from the engine thread, on its blocking connection.
        self._should_yield = chunk_redis.register_script(protocol.SHOULD_YIELD_LUA)
        self._yield = chunk_redis.register_script(protocol.YIELD_LUA)
        self.memory = JobGuard(settings, chunk_redis, self.processing, self._abort)
        self.metrics = WorkerMetrics(settings, engine, lambda: self.memory.watch.ceiling, self.voices.lookups)
        #: Exit status for the process once the claim loop ends (non-zero: systemd restarts the worker).
        self.exit_code = 0

    # ----- lifecycle -------------------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """First call: finish the current job, then exit. Second call: abort it too."""
        if self._stopping.is_set():
            self._force = True
            self._abort.set()
            logger.warning("worker %s: second stop signal, aborting the running job", self.worker_id)
        else:
            logger.info("worker %s: stopping after the current job", self.worker_id)
        self._stopping.set()

    def install_signal_handlers(self) -> None:
        """Route SIGTERM and SIGINT to :meth:`request_stop` (the handler only flips flags)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)

    async def run(self, *, burst: bool = False, on_ready: Callable[[], object] | None = None) -> None:
        """Serve jobs until stopped (or, with ``burst``, until the queue is empty)."""
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
        logger.info("worker %s ready: engine %s at %d Hz", self.worker_id, self.engine.name, self.engine.sample_rate)
        try:
            await self._claim_loop(burst)
        finally:
            self.memory.close()
            await self.supervisor.close()
            await self.voices.close()
            with contextlib.suppress(Exception):
                await self.redis.delete(protocol.heartbeat_key(self.worker_id))
            if self._own_beat_redis:
                with contextlib.suppress(Exception):
                    await self.beat_redis.aclose()
            logger.info("worker %s stopped after %d jobs", self.worker_id, self.jobs_done)

    async def _claim_loop(self, burst: bool) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            try:
                if self._orphan is not None:
                    await self._settle_orphan()
                # A bytes reply (the client decodes nothing); redis-py types it bytes or str.
                raw = cast(
                    bytes | None,
                    await self.redis.blmove(
                        protocol.QUEUE,
                        self.processing,
                        0.01 if burst else CLAIM_BLOCK_S,  # type: ignore[arg-type]  # redis accepts float seconds
                        "RIGHT",
                        "LEFT",
                    ),
                )
                backoff = 0.1
            except (RedisError, OSError) as err:  # error replies too (OOM, READONLY): retried, never fatal
                logger.warning("worker %s: redis unavailable (%s); retrying in %.1fs", self.worker_id, err, backoff)
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)
                continue
            if raw is None:
                if burst:
                    return
                continue
            current = raw
            try:
                # A job that yields its slot hands back the job it claimed in its place.
                next_raw: bytes | None = raw
                while next_raw is not None:
                    current = next_raw
                    self._progress = None
                    next_raw = await self._handle(next_raw)
            except (RedisConnectionError, RedisTimeoutError, OSError) as err:
                # The job stays in our in-flight list until Redis answers again: then it is queued again (its audio
                # had not started) or ended with a clear error (_settle_orphan).
                logger.error("worker %s: redis lost during a job: %s", self.worker_id, err)
                self._orphan = (current, self._progress)
                await asyncio.sleep(backoff)

    async def _settle_orphan(self) -> None:
        """Settle the job that lost Redis while it ran, once Redis answers (raises while it does not).

        A job that had published nothing and is not marked started goes back to the head of the queue, to be run
        once; any other ends with ``redis_failover`` (its client may have heard part of it: never again).
        """
        assert self._orphan is not None
        raw, progress = self._orphan
        job = protocol.Job.from_json(raw)
        log = JobLog(logger, {"job_id": job.job_id, "worker_id": self.worker_id})
        published = progress is not None and progress.seq > job.seq
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
        self._orphan = None

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
        job = self.current
        status = {
            "worker_id": self.worker_id,
            "engine": self.engine.name,
            "pid": os.getpid(),
            "state": "busy" if job else "idle",
            "job_id": job.job_id if job else None,
            "ts": time.time(),
            "restarts": self.supervisor.restarts + self.voices.library.supervisor.restarts,
            "rss": rss_bytes(),
            "max_rss": self.memory.watch.ceiling,
        }
        # Bounded: a connection that stopped answering (a Redis restart or failover can leave one) is dropped when
        # the time is up, and the next beat opens a fresh one, long before the TTL runs out.
        async with asyncio.timeout(beat_bound_s(self.settings)), self.beat_redis.pipeline(transaction=False) as pipe:
            pipe.set(protocol.heartbeat_key(self.worker_id), json.dumps(status), ex=self.settings.heartbeat_ttl_s)
            pipe.sadd(protocol.WORKERS, self.worker_id)
            await pipe.execute()

    async def _heartbeat_loop(self) -> None:
        """Beat every heartbeat interval, on the heartbeat's own connections; nothing else runs in this loop."""
        pause = self.settings.heartbeat_interval_s
        while True:
            await asyncio.sleep(pause)
            pause = self.settings.heartbeat_interval_s
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
            await asyncio.sleep(self.settings.heartbeat_interval_s)
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
        return [w for w in others if w in missing and now - self._missing_since[w] >= self.settings.heartbeat_ttl_s]

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
        while True:
            try:
                pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
                await pubsub.subscribe(protocol.CANCEL_CHANNEL)
                async for message in pubsub.listen():
                    job = self.current
                    data = message.get("data")
                    if job is not None and isinstance(data, bytes) and data.decode() == job.job_id:
                        JobLog(logger, {"job_id": job.job_id, "worker_id": self.worker_id}).info("cancelled")
                        self._abort.set()
            except (RedisConnectionError, RedisTimeoutError, OSError) as err:
                logger.warning("worker %s: cancel listener lost redis: %s", self.worker_id, err)
                await asyncio.sleep(1.0)

    # ----- one job ---------------------------------------------------------------------------------------------

    async def _handle(self, raw: bytes) -> bytes | None:
        """Run one claimed job (or remainder); return the job claimed in its place when it yielded its slot."""
        try:
            job = protocol.Job.from_json(raw)
        except (ValueError, TypeError) as err:
            logger.error("worker %s: dropping malformed job: %s", self.worker_id, err)
            await self.redis.lrem(self.processing, 1, raw)  # type: ignore[arg-type]  # redis-py types the value str
            return None
        log = JobLog(logger, {"job_id": job.job_id, "worker_id": self.worker_id})
        skip = await self._skip_reason(job)
        if isinstance(skip, _Duplicate):
            log.warning("dropped unrun, silently: a copy of this job was claimed before (by %s)", skip.owner)
            await self.redis.lrem(self.processing, 1, raw)  # type: ignore[arg-type]  # redis-py types the value str
            return None
        if skip is not None:
            log.info("dropped unrun: %s", skip[1])
            self.metrics.dropped(job, skip[0])
            await self._record_terminal(job, protocol.error_event(job.seq, *skip), release=raw)
            return None
        self.current = job
        self.metrics.claimed(job)
        self._abort.clear()
        started = time.time()
        log.info("claimed (%d chars, part %d, voice %s, %s)", len(job.text), job.part, job.voice_id, job.output_format)
        progress = _Progress(seq=job.seq, samples=job.sample_offset)
        progress.gate = CreditGate(self.chunk_redis, job, self.settings.flow_wait_s, self._abort)
        self._progress = progress
        self.memory.begin(job, raw, lambda: progress.seq)
        try:
            terminal = await self._synthesize(job, raw, progress, log)
        finally:
            owned = self.memory.finish()
            self.current = None
        if not owned:  # the memory guard recorded the job's end and is restarting the process
            return None
        self.metrics.ended(job, terminal, memory_over=self.memory.over)
        if terminal is None:
            log.info("yielded its slot after chunk #%d; the rest waits in the queue", progress.seq - 1)
            return progress.handed_to
        terminal.meta.update(worker_id=self.worker_id, started_at=started, finished_at=time.time())
        await self._record_terminal(job, terminal, release=raw)
        self.jobs_done += 1
        log.info("%s in %.3fs (peak RSS %d MB)", terminal.kind, time.time() - started, self.memory.watch.peak // 10**6)
        if self.memory.over:
            await self._shed_memory(log)
        return None

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
                pipe.expire(key, self.settings.job_ttl_s)
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

    async def _synthesize(
        self,
        job: protocol.Job,
        raw: bytes,
        progress: _Progress,
        log: logging.LoggerAdapter[logging.Logger],
    ) -> protocol.Event | None:
        """Run the engine in a thread that publishes each encoded chunk as it is made; return the terminal event,
        or None when the job yielded its slot (``progress.handed_to`` then holds the job claimed in its place).

        The chunks are published from the engine thread with a blocking client: a publish there is one write and
        one read, where handing each chunk to the event loop first cost a wake-up, a queue and a pooled async
        command (profiled: most of a simulated worker's CPU). The terminal event is published by the loop after the
        thread has returned, so it always comes after the last chunk.
        """
        try:
            fmt = parse_output_format(job.output_format, route="convert")
        except OutputFormatError as err:
            return protocol.error_event(0, ErrorCode.INVALID_OUTPUT_FORMAT, str(err))
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self._produce, job, raw, fmt, progress)
        except (RedisConnectionError, RedisTimeoutError):
            # Redis went away mid-job: handled by the claim loop, as for any Redis failure. (redis-py wraps socket
            # errors in these; a bare OSError here comes from the engine, e.g. a missing file, and fails the job.)
            raise
        except VoiceUnavailable as err:  # never another voice instead
            log.error("voice refused: %s", err)
            return protocol.error_event(progress.seq, err.code, str(err))
        except MemoryError:
            log.error("synthesis ran out of memory")
            return protocol.error_event(progress.seq, ErrorCode.INPUT_TOO_COMPLEX, TOO_COMPLEX_MESSAGE)
        except Exception as err:
            if self.memory.over:  # what an engine raises while memory runs out is not the cause
                log.error("synthesis failed over the memory ceiling: %r", err)
                return protocol.error_event(progress.seq, ErrorCode.INPUT_TOO_COMPLEX, TOO_COMPLEX_MESSAGE)
            log.error("synthesis failed: %r", err)
            return protocol.error_event(progress.seq, ErrorCode.SYNTHESIS_FAILED, f"Synthesis failed: {err}")
        return self._ending(job, progress, log)

    def _ending(
        self, job: protocol.Job, progress: _Progress, log: logging.LoggerAdapter[logging.Logger]
    ) -> protocol.Event | None:
        """The terminal event of a job whose engine run returned (None: it yielded its slot)."""
        if self.memory.over:
            return protocol.error_event(progress.seq, ErrorCode.INPUT_TOO_COMPLEX, TOO_COMPLEX_MESSAGE)
        if progress.yielded:
            return None
        if progress.gate is not None and progress.gate.stalled:
            log.warning("stopped: %s", progress.gate.stalled)
            return protocol.error_event(
                progress.seq, ErrorCode.CLIENT_TOO_SLOW, f"The job was stopped: {progress.gate.stalled}."
            )
        if progress.too_long:
            log.warning("stopped at the hard bound of %g s of audio per job", self._hard_audio_s)
            return protocol.error_event(
                progress.seq,
                ErrorCode.AUDIO_TOO_LONG,
                f"The audio passed the bound of {self._hard_audio_s:g} s per request; split the text.",
            )
        if self._abort.is_set():
            if self._force:
                return protocol.error_event(
                    progress.seq, ErrorCode.WORKER_STOPPING, "The worker was stopped during this job."
                )
            return protocol.error_event(progress.seq, ErrorCode.CANCELLED, "The job was cancelled.")
        return protocol.Event(
            "done",
            progress.seq,
            {
                "samples": progress.samples,
                "sample_rate": self.engine.sample_rate,
                "chars": job.total_chars or len(job.text),
            },
        )

    def _produce(self, job: protocol.Job, raw: bytes, fmt: OutputFormat, progress: _Progress) -> None:
        """In the engine thread: synthesise, encode and publish every chunk, counting them in ``progress``.

        Between pieces, yield the slot when the next job in the queue should go first (SHOULD_YIELD_LUA).
        """
        encoder = Encoder(fmt, self.engine.sample_rate)
        metas = ChunkMeta(fmt, self.engine.sample_rate, job.alignment, continues=job.resumed)
        voice = self.voice_spec(job.voice_id)
        waited_s: float | None = round(max(0.0, time.time() - (job.queued_at or job.created_at)), 4)
        offset = job.sample_offset
        # A batch job gives way to any fresh job, a realtime segment to another owner's (SHOULD_YIELD_LUA); a segment
        # that fits in one piece (an agent's usual flush) is never cut.
        may_yield = fmt.codec in YIELDING_CODECS and (
            job.priority == "batch" or len(job.text) > self.settings.piece_max_chars
        )
        # Only a job that may yield is cut into pieces: the others go to the engine whole (one call, one seeding).
        pieces = text_pieces(job.text, self.settings.piece_max_chars) if may_yield else [job.text]
        # A job's first sentence may be spoken in two calls, the first one short (docs/scaling.md): not a remainder's.
        cuts_first = self.settings.first_piece and not job.resumed and profile(self.settings.engine).cuts_first_piece

        def speak(text: str) -> Iterator[EngineChunk]:
            return self.engine.synthesize(text, voice, job.voice_settings, self._abort.is_set, seed=job.seed)

        for index, piece in enumerate(pieces):
            if self._abort.is_set():
                return
            cut = first_piece(piece, cuts_first and index == 0)
            made = speak_cut(speak, piece, cut, self.engine.sample_rate)
            for chunk in self.metrics.chunks(job, made):
                audio = encoder.encode(chunk.pcm)
                meta = metas.chunk(chunk, audio, offset)
                if waited_s is not None:
                    # The part's first chunk says how long it waited for the slot (the front's slot-wait figure).
                    meta.update(part=job.part, waited_s=waited_s)
                    waited_s = None
                if not self._publish_chunk(job, progress, audio, meta):
                    return
                offset += len(chunk.pcm)
                if offset > self._hard_audio_s * self.engine.sample_rate:
                    progress.too_long = True
                    return
                if self._abort.is_set():
                    return
            rest = pieces[index + 1 :]
            if (
                rest
                and may_yield
                and not self._stopping.is_set()
                and not self._abort.is_set()
                and self._should_yield(keys=[protocol.QUEUE], args=[job.priority, job.owner, job.turn])
            ):
                self._finish_encoding(job, progress, encoder, metas)
                gate = progress.gate
                assert gate is not None
                remainder = dataclasses.replace(
                    job,
                    sent_bytes=gate.sent,
                    consumed_bytes=gate.consumed,
                    granted_bytes=gate.granted,
                    text=" ".join(rest),
                    part=job.part + 1,
                    seq=progress.seq,
                    sample_offset=offset,
                    total_chars=job.total_chars or len(job.text),
                    queued_at=time.time(),
                )
                progress.handed_to = self._yield(
                    keys=[protocol.QUEUE, self.processing], args=[raw, remainder.to_json(), job.priority]
                )
                progress.yielded = True
                return
        self._finish_encoding(job, progress, encoder, metas)

    def _finish_encoding(self, job: protocol.Job, progress: _Progress, encoder: Encoder, metas: ChunkMeta) -> None:
        """Flush the encoder and publish what it held back (with the alignment still owed) as a last chunk."""
        tail = encoder.finish()
        tail_meta = metas.tail(tail)
        if tail_meta is not None:
            self._publish_chunk(job, progress, tail, tail_meta)

    @property
    def _hard_audio_s(self) -> float:
        """The most audio one job may make: twice the front's estimate bound (ZSYNTH_MAX_AUDIO), which reads fast."""
        return 2 * self.settings.max_audio_s

    def _publish_chunk(self, job: protocol.Job, progress: _Progress, audio: bytes, meta: dict[str, Any]) -> bool:
        """In the engine thread: publish one chunk event within the job's credit (the first one also marks the job
        as started); False when the job must stop instead (cancelled, or its front takes nothing)."""
        gate = progress.gate
        if gate is not None:
            if not gate.admit(len(audio)):
                return False
            gate.sent_chunk(len(audio))
        event = protocol.Event("chunk", progress.seq, meta, audio, job_id=job.job_id)
        if progress.seq == 0:
            # Mark the job as started in the same round trip, and before its first audio goes out: a reaper never
            # re-runs a started job, and whoever hears the first chunk finds the job marked (a large chunk can reach
            # Redis in several reads, so a mark sent after it could land after a client's look).
            with self.chunk_redis.pipeline(transaction=False) as pipe:
                pipe.hset(protocol.job_key(job.job_id), protocol.STARTED_FIELD, str(time.time()))
                pipe.expire(protocol.job_key(job.job_id), self.settings.job_ttl_s)
                pipe.publish(job.reply_to, event.encode())
                pipe.execute()
        else:
            self.chunk_redis.publish(job.reply_to, event.encode())
        progress.seq += 1
        progress.samples += int(meta.get("samples", 0))
        return True

    # ----- the memory ceiling ----------------------------------------------------------------------------------

    async def _shed_memory(self, log: logging.LoggerAdapter[logging.Logger]) -> None:
        """After a job stopped for memory: give the engine's caches back; restart if the RSS stays over."""
        release = getattr(self.engine, "release_memory", None)
        if callable(release):
            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(None, release)
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
            pipe.expire(protocol.job_key(job.job_id), self.settings.job_ttl_s)
            if release is not None:
                pipe.lrem(self.processing, 1, release)  # type: ignore[arg-type]  # redis-py types the value str
            await pipe.execute()
