"""The front's side of the job protocol: submit a job, then read its events with deadlines.

One front process holds one pub/sub connection, subscribed (and confirmed by Redis) at start to the front's own
reply channel. Every job names that channel, and every event names its job, so a single listener task demultiplexes
the events into per-job queues with no pub/sub traffic per job.

When the listener loses Redis (a restart, a Sentinel failover), the events published meanwhile are lost; nothing
else is. So the open streams are not failed at once: redis-py reconnects and resubscribes (to the new master after
a promotion), and then :meth:`Dispatcher._audit` looks at each job that was open when the connection dropped. A job
whose terminal state is recorded ends with it (or with ``lost_events`` when chunks are missing); a job that was
queued, never claimed and is missing from the queue (a failover lost it) is queued again once, under a new id; the
rest go on, and a gap in the sequence numbers or the deadlines end them with a clear error. Every end of a job is
logged once, with its reason (:meth:`JobStream.end`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, Final

from aiohttp import web
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from zsynth.core import protocol
from zsynth.core.audio import OutputFormatError, parse_output_format
from zsynth.core.codes import CodedError
from zsynth.core.config import Settings
from zsynth.core.protocol import ErrorCode
from zsynth.core.redis_link import is_sentinel_url
from zsynth.core.supervise import Supervisor
from zsynth.services.flow import Credit, Ledger, window_bytes
from zsynth.services.metrics import Metrics

logger = logging.getLogger(__name__)

# How long a job waits for the reply listener to subscribe again after it lost Redis (then: 503 with Retry-After).
LISTENER_WAIT_S: Final = 2.0
# How often a paced stream waiting for its next chunk says its grant again (one may have been lost with a failover).
REGRANT_S: Final = 2.0


async def _pass_through(response: Any) -> Any:
    return response


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class JobFailed(CodedError):
    """A job ended in an error event (or its deadline); carries the machine code and the message.

    ``code`` is an :class:`~zsynth.core.protocol.ErrorCode` value, or whatever code a (newer) worker sent.
    """


def _share_full(limit: int) -> JobFailed:
    return JobFailed(ErrorCode.QUEUE_FULL, f"This key already has {limit} jobs queued or running here; retry shortly.")


class JobStream:
    """The events of one submitted job, read with the first-chunk and per-chunk deadlines.

    Use as an async context manager: leaving it before the terminal event cancels the job (the client went away).
    """

    def __init__(
        self, dispatcher: Dispatcher, job: protocol.Job, owner: str | None = None, credit: Credit | None = None
    ) -> None:
        self.dispatcher = dispatcher
        self.job = job
        # Holds what the worker published and the transport has not taken yet: at most the job's window plus one
        # chunk, since the worker publishes only within the credit the front grants as chunks are taken (flow.py).
        self.queue: asyncio.Queue[protocol.Event] = asyncio.Queue()
        self.credit = credit
        self.finished = False
        self.terminal: protocol.Event | None = None
        self.first_chunk_at: float | None = None
        self.submitted_at = time.monotonic()
        self._expected_seq = 0
        self.owner = owner  # the credential whose share of the queue this job counts against
        self.queued_as: str = ""  # the JSON pushed on the queue (to find the job there after a failover)
        self.resubmitted = False  # queued again once after a failover lost it

    async def __aenter__(self) -> JobStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def seen(self) -> int:
        """Events received so far: those read and those waiting in the queue."""
        return self._expected_seq + self.queue.qsize()

    @property
    def started(self) -> bool:
        """True once this stream has received the job's first chunk."""
        return self.seen > 0

    async def close(self, reason: str = "client gone") -> None:
        """Stop listening; cancel the job unless it already ended (``reason`` goes in the log line of its end)."""
        if not self.finished:
            self.end(ErrorCode.CANCELLED, reason)
            await self.dispatcher.cancel(self.job.job_id)
        await self.dispatcher.release(self.job.job_id)

    def end(self, outcome: str, reason: str, terminal: protocol.Event | None = None) -> None:
        """Mark the job ended: count it by outcome and log one line with its id and the reason."""
        self.finished = True
        self._record(outcome, terminal)
        level = logging.INFO if outcome in ("done", ErrorCode.CANCELLED) else logging.WARNING
        logger.log(
            level,
            "job %s ended: %s",
            self.job.job_id,
            reason,
            extra={"job_id": self.job.job_id, "request_id": self.job.request_id, "outcome": outcome},
        )

    async def next_event(self) -> protocol.Event:
        """The next event, or JobFailed(timeout) when the deadline for it passes."""
        settings = self.dispatcher.settings
        timeout = settings.jobs.first_chunk_timeout_s if self._expected_seq == 0 else settings.jobs.chunk_timeout_s
        try:
            event = await self._wait(timeout)
        except TimeoutError:
            recovered = await self.dispatcher.recover_terminal(self.job.job_id, self._expected_seq)
            if recovered is None:
                what = "first" if self._expected_seq == 0 else f"#{self._expected_seq}"
                self.end(ErrorCode.TIMEOUT, f"deadline: no {what} chunk within {timeout:g} s")
                await self.dispatcher.cancel(self.job.job_id)
                raise JobFailed(
                    ErrorCode.TIMEOUT, f"No audio from the engine within {timeout:g} s; the service may be overloaded."
                ) from None
            event = recovered
        if event.seq != self._expected_seq and not (event.terminal and event.seq == protocol.ANY_SEQ):
            self.end(ErrorCode.LOST_EVENTS, f"lost events: expected #{self._expected_seq}, got #{event.seq}")
            await self.dispatcher.cancel(self.job.job_id)
            raise JobFailed(
                ErrorCode.LOST_EVENTS, f"Audio events were lost (expected #{self._expected_seq}, got #{event.seq})."
            )
        self._expected_seq += 1
        if self.credit is not None and event.audio:
            await self.dispatcher.took(self, len(event.audio))
        waited = event.meta.get("waited_s")
        if waited is not None:
            # The first chunk of each part says how long that part waited for a slot (see workers.worker).
            part = "first" if int(event.meta.get("part", 0)) == 0 else "resumed"
            self.dispatcher.metrics.slot_wait.labels(self.job.priority, part).observe(float(waited))
        if event.terminal:
            self.terminal = event
            if event.kind == "done":
                self.end("done", "done", event)
            else:
                code = str(event.meta.get("code", ErrorCode.ERROR))
                self.end(code, f"error {code}: {event.meta.get('message', '')}", event)
        elif self.first_chunk_at is None:
            self.first_chunk_at = time.monotonic()
            self.dispatcher.metrics.ttfa.labels(self.job.priority).observe(self.first_chunk_at - self.submitted_at)
        return event

    async def _wait(self, timeout: float) -> protocol.Event:
        """The next event from the buffer; TimeoutError after ``timeout`` seconds.

        A paced job whose audio has started gets its grant said again every :data:`REGRANT_S` while it waits: a
        grant lost with a failover would otherwise leave its worker waiting for credit and this stream for audio.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError
            try:
                async with asyncio.timeout(min(left, REGRANT_S) if self.credit is not None else left):
                    return await self.queue.get()
            except TimeoutError:
                if self.credit is not None and self._expected_seq > 0 and loop.time() < deadline:
                    await self.dispatcher.grant(self, self.dispatcher.ledger.again(self.credit))

    def _record(self, outcome: str, terminal: protocol.Event | None = None) -> None:
        metrics = self.dispatcher.metrics
        metrics.jobs.labels(outcome).inc()
        metrics.job_duration.labels(self.job.priority).observe(time.monotonic() - self.submitted_at)
        if terminal is not None and terminal.kind == "done":
            rate = float(terminal.meta.get("sample_rate") or 0)
            if rate:
                metrics.audio_seconds.inc(float(terminal.meta.get("samples", 0)) / rate)
            metrics.characters.inc(len(self.job.text))

    async def chunks(self) -> AsyncIterator[protocol.Event]:
        """Yield chunk events until ``done``; raise JobFailed on an error event or a missed deadline."""
        while True:
            event = await self.next_event()
            if event.kind == "chunk":
                yield event
            elif event.kind == "done":
                return
            else:
                raise JobFailed(
                    str(event.meta.get("code", ErrorCode.ERROR)), str(event.meta.get("message", "Job failed."))
                )


class Dispatcher:
    """Submits jobs to the Redis queue and routes their events back to the waiting requests."""

    def __init__(
        self, settings: Settings, redis: Redis, metrics: Metrics | None = None, supervisor: Supervisor | None = None
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.metrics = metrics or Metrics()
        self.front_id = protocol.new_job_id()
        self.reply_channel = protocol.reply_channel(self.front_id)
        self._pubsub: PubSub | None = None
        self._streams: dict[str, JobStream] = {}
        # The one reply listener is vital: while it is down no job of this front gets its audio (/readyz says so).
        self.supervisor = supervisor or Supervisor()
        self._push = redis.register_script(protocol.PUSH_BOUNDED_LUA)
        self.ledger = Ledger(settings.flow.front_audio_budget)  # the audio all this front's jobs may hold in flight
        # Unfinished jobs per credential fingerprint, and a condition to wait on for a share to free up.
        self._owned: collections.Counter[str] = collections.Counter()
        self._share_freed = asyncio.Condition()
        self.live_workers = 0  # workers with a fresh heartbeat, counted every heartbeat interval: sizes the shares
        # While the reply listener is cut off from Redis: when that began, and the jobs open then (audited after).
        self._lost_since: float | None = None
        self._listening = asyncio.Event()  # set while the reply listener is subscribed
        self._open_at_loss: set[str] = set()
        self._audits: set[asyncio.Task[None]] = set()
        # Retry a job's push this long while Redis is unreachable (a Sentinel failover); 0: answer 503 at once.
        self.push_retry_s = settings.redis.failover_wait_s if is_sentinel_url(settings.redis.url) else 0.0

    async def start(self) -> None:
        """Subscribe to this front's reply channel, start the listener, and wait until Redis confirms."""
        # redis-py's default push handler formats every message (audio included) for a debug log line it then
        # drops; on a busy front that was a quarter of the CPU. An identity handler skips it.
        self._pubsub = self.redis.pubsub(push_handler_func=_pass_through)
        await self._pubsub.subscribe(self.reply_channel)
        self.supervisor.spawn("dispatch-listener", self._listen)
        self.supervisor.spawn("worker-count", self._count_workers, vital=False)
        await asyncio.wait_for(self._listening.wait(), 10.0)
        logger.info("dispatcher %s listening on %s", self.front_id, self.reply_channel)

    async def close(self) -> None:
        """Stop the listener and fail every waiting stream."""
        await self.supervisor.close()
        for task in list(self._audits):
            task.cancel()
        self._fail_all(ErrorCode.SHUTTING_DOWN, "The server is shutting down.")
        if self._pubsub is not None:
            await self._pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated

    @property
    def in_flight(self) -> int:
        """Jobs submitted by this front that have not ended."""
        return len(self._streams)

    @property
    def share_limit(self) -> int:
        """Unfinished jobs one credential may have from this front: what the live workers can take
        (ZSYNTH_CREDENTIAL_JOBS_PER_WORKER each, at least ZSYNTH_CREDENTIAL_MIN_JOBS), never more than
        ZSYNTH_CREDENTIAL_QUEUE_SHARE of the queue."""
        settings = self.settings
        by_workers = max(
            settings.jobs.credential_min_jobs, settings.jobs.credential_jobs_per_worker * self.live_workers
        )
        return max(1, min(by_workers, int(settings.jobs.credential_queue_share * settings.jobs.max_queue)))

    async def _count_workers(self) -> None:
        """Keep :attr:`live_workers` (workers with a fresh heartbeat) current, for the share of each owner."""
        while True:
            with contextlib.suppress(RedisError, OSError, ValueError):
                ids = protocol.worker_ids(await self.redis.smembers(protocol.WORKERS))
                beats = await self.redis.mget([protocol.heartbeat_key(i) for i in ids]) if ids else []
                self.live_workers = sum(1 for beat in beats if beat is not None)
            await asyncio.sleep(self.settings.worker.heartbeat_interval_s)

    async def wait_for_share(self, owner: str, wait_s: float) -> None:
        """Return once ``owner`` may submit a job (at once if it may now); JobFailed("queue_full") after ``wait_s``."""
        limit = self.share_limit
        if self._owned[owner] < limit:
            return
        try:
            async with asyncio.timeout(wait_s), self._share_freed:
                await self._share_freed.wait_for(lambda: self._owned[owner] < limit)
        except TimeoutError:
            raise _share_full(limit) from None

    async def _give_share(self, owner: str) -> None:
        self._owned[owner] -= 1
        if self._owned[owner] <= 0:
            del self._owned[owner]
        async with self._share_freed:
            self._share_freed.notify_all()

    async def submit(self, job: protocol.Job, *, owner: str | None = None) -> JobStream:
        """Push the job on the queue, its events addressed to this front's reply channel.

        Raises JobFailed("queue_full") when ZSYNTH_MAX_QUEUE jobs already wait, and JobFailed("redis_unavailable")
        when Redis does not answer; both are answered with Retry-After. With ``owner`` (a credential fingerprint)
        the job also counts against that credential's share of the queue (:attr:`share_limit`): past it the call
        raises JobFailed("queue_full") at once (:meth:`wait_for_share` is the way to wait for room first), so one
        key cannot fill the queue ahead of everyone else's jobs.
        """
        assert self._pubsub is not None, "dispatcher not started"
        if owner is not None:
            limit = self.share_limit
            if self._owned[owner] >= limit:
                raise _share_full(limit)
            # The queue serves owners in turn (PUSH_BOUNDED_LUA): this job's turn counts its owner's unfinished jobs.
            job.owner, job.turn = owner, self._owned[owner]
            self._owned[owner] += 1
        if not job.start_deadline:
            # A job still queued when its client has given up waiting is dropped unrun.
            job.start_deadline = time.time() + self.settings.jobs.first_chunk_timeout_s
        job.reply_to = self.reply_channel
        credit = self._credit_for(job)
        stream = JobStream(self, job, owner, credit)
        self._streams[job.job_id] = stream
        try:
            deadline = time.monotonic() + max(LISTENER_WAIT_S, self.push_retry_s)
            if not self._listening.is_set():
                # A job pushed while the listener is not subscribed could have its events published to nobody.
                await asyncio.wait_for(self._listening.wait(), deadline - time.monotonic())
            pushed = await self._push_job(stream, deadline)
        except (RedisError, OSError, TimeoutError) as err:
            await self.release(job.job_id)
            logger.warning("job %s not queued: redis unavailable (%r)", job.job_id, err)
            raise JobFailed(ErrorCode.REDIS_UNAVAILABLE, "The job queue is unavailable; retry shortly.") from err
        except BaseException:
            await self.release(job.job_id)
            raise
        if not pushed:
            await self.release(job.job_id)
            raise JobFailed(ErrorCode.QUEUE_FULL, "The service is at capacity; retry shortly.")
        logger.debug("job %s queued (%s, %d chars)", job.job_id, job.priority, len(job.text))
        return stream

    def _credit_for(self, job: protocol.Job) -> Credit | None:
        """Open the job's flow-control credit and write its window and first grant into the record (None: off)."""
        try:
            rate = parse_output_format(job.output_format, route="stream").bytes_per_second
        except OutputFormatError:
            rate = parse_output_format(job.output_format, route="convert").bytes_per_second
        settings = self.settings
        window = window_bytes(rate, settings.flow.window_bytes, settings.flow.window_seconds)
        if not window:
            return None
        credit = self.ledger.open(window)
        job.window, job.granted_bytes = window, credit.granted
        return credit

    async def took(self, stream: JobStream, size: int) -> None:
        """The transport took ``size`` bytes of the stream's audio: grant its worker more when that is due."""
        assert stream.credit is not None
        grant = self.ledger.take(stream.credit, size, drained=stream.queue.empty())
        if grant is not None:
            await self.grant(stream, grant)

    async def grant(self, stream: JobStream, grant: tuple[int, int]) -> None:
        """Tell the stream's worker how much was taken and how much it may have published (absolute counts)."""
        if stream.finished:
            return
        key = protocol.credit_key(stream.job.job_id)
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.rpush(key, f"{grant[0]} {grant[1]}")
                pipe.ltrim(key, -4, -1)  # the newest grant says it all; a worker that never waits never pops them
                pipe.expire(key, self.settings.jobs.ttl_s)
                await pipe.execute()
        except (RedisError, OSError) as err:  # the next grant says it all again; a worker left waiting times out
            logger.warning("job %s: credit not granted: %r", stream.job.job_id, err)

    async def _push_job(self, stream: JobStream, deadline: float) -> bool:
        """Push the stream's job; False when the queue is full.

        With a Sentinel URL a connection error is retried until ``deadline`` (monotonic): a failover takes
        Sentinel's down-after time and an election, and a request that waits that long is better served than
        refused. With a plain URL the caller's deadline is only the listener's, and the first error is raised.
        """
        stream.queued_as = stream.job.to_json()
        if not self.push_retry_s:
            deadline = 0.0
        pause = 0.1
        while True:
            try:
                # Owners in turn, realtime before batch within a turn, remainders last (PUSH_BOUNDED_LUA).
                return bool(
                    await self._push(keys=[protocol.QUEUE], args=[stream.queued_as, self.settings.jobs.max_queue])
                )
            except (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError) as err:
                if time.monotonic() + pause > deadline:
                    raise
                logger.info("job %s: redis unreachable (%r); pushing again in %.1f s", stream.job.job_id, err, pause)
                await asyncio.sleep(pause)
                pause = min(1.0, pause * 2)

    async def cancel(self, job_id: str, queued_as: str | None = None) -> None:
        """Tell the workers this job's client is gone: take it off the queue if it waits there (``queued_as``, its
        JSON as pushed: by default that of this front's open stream), skip it if a worker claims it anyway, stop it
        if running."""
        if queued_as is None and (stream := self._streams.get(job_id)) is not None:
            queued_as = stream.queued_as or None
        with contextlib.suppress(Exception):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.set(protocol.cancel_key(job_id), b"1", ex=self.settings.jobs.ttl_s)
                if queued_as is not None:
                    # A job that waits leaves the queue at once: it no longer holds a place, nor a turn of its owner.
                    pipe.lrem(protocol.QUEUE, 1, queued_as)
                pipe.publish(protocol.CANCEL_CHANNEL, job_id)
                # A worker waiting for credit wakes at once (a running one hears the channel within one chunk).
                pipe.rpush(protocol.credit_key(job_id), protocol.CREDIT_CANCEL)
                pipe.expire(protocol.credit_key(job_id), self.settings.jobs.ttl_s)
                await pipe.execute()
            logger.debug("job %s: cancel sent to the workers", job_id)

    async def release(self, job_id: str) -> None:
        """Forget a job: events that still arrive for it are dropped; its credential's share is given back."""
        stream = self._streams.pop(job_id, None)
        if stream is not None and stream.credit is not None:
            self.ledger.close(stream.credit)
        if stream is not None and stream.owner is not None:
            await self._give_share(stream.owner)

    async def recover_terminal(self, job_id: str, seq: int) -> protocol.Event | None:
        """After a missed deadline, read the job's terminal record in case its event was missed.

        ``seq`` is the number of events the stream holds: a record that counts more (its chunks were lost with the
        connection) comes back as ``lost_events``, never as a ``done`` that would end the audio short.
        """
        with contextlib.suppress(Exception):
            return _terminal_of(await self.redis.hgetall(protocol.job_key(job_id)), seq)
        return None

    def _fail_all(self, code: ErrorCode, message: str) -> None:
        """End every waiting stream (the front is stopping)."""
        for stream in self._streams.values():
            stream.queue.put_nowait(protocol.error_event(protocol.ANY_SEQ, code, message))

    # ----- after the reply listener lost Redis ----------------------------------------------------------------

    def _connection_lost(self, err: Exception) -> None:
        self._listening.clear()
        if self._lost_since is None:
            self._lost_since = time.monotonic()
            logger.warning("dispatch listener lost redis (%s); %d open jobs wait for it", err, len(self._streams))
        self._open_at_loss.update(self._streams)

    def _connection_back(self) -> None:
        self._listening.set()
        if self._lost_since is None:
            return
        logger.warning("dispatch listener back on redis after %.2f s", time.monotonic() - self._lost_since)
        self._lost_since = None
        job_ids, self._open_at_loss = self._open_at_loss, set()
        task = asyncio.create_task(self._audit(job_ids))
        self._audits.add(task)
        task.add_done_callback(self._audits.discard)

    async def _audit(self, job_ids: set[str], settle_s: float = 0.5) -> None:
        """Look at each job that was open while events could be lost, and end or re-submit those that need it."""
        # Events published just after the resubscription are read first, so "seen" counts them.
        await asyncio.sleep(settle_s)
        for job_id in job_ids:
            stream = self._streams.get(job_id)
            if stream is None or stream.finished:
                continue
            try:
                await self._audit_one(stream)
            except (RedisError, OSError) as err:  # still unreachable: the stream's deadlines end it
                logger.warning("job %s: not audited after the reconnection: %r", job_id, err)

    async def _audit_one(self, stream: JobStream) -> None:
        job_id = stream.job.job_id
        state = await self.redis.hgetall(protocol.job_key(job_id))
        terminal = _terminal_of(state, stream.seen)
        if terminal is not None:
            stream.queue.put_nowait(terminal)  # its own event was published while the listener was away
            return
        if stream.started or _field(state, protocol.STARTED_FIELD) or _field(state, protocol.OWNER_FIELD):
            return  # a worker has it: its events, a sequence gap or the deadlines end the stream
        if await self.redis.lpos(protocol.QUEUE, stream.queued_as) is not None:
            return  # still queued on this master
        if stream.resubmitted:
            return  # lost twice: its first-chunk deadline ends it
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(protocol.job_key(job_id), protocol.OWNER_FIELD, protocol.RESUBMITTED)
            pipe.expire(protocol.job_key(job_id), self.settings.jobs.ttl_s)
            won, _ = await pipe.execute()
        if not won:
            return  # a worker claimed it meanwhile
        await self._resubmit(stream)

    async def _resubmit(self, stream: JobStream) -> None:
        """Queue a job a failover lost again, once, under a new id (a worker that finds the old one drops it)."""
        old_id = stream.job.job_id
        stream.job = dataclasses.replace(stream.job, job_id=protocol.new_job_id())
        stream.resubmitted = True
        self._streams.pop(old_id, None)
        self._streams[stream.job.job_id] = stream
        try:
            pushed = await self._push_job(stream, time.monotonic() + self.push_retry_s)
        except (RedisError, OSError, TimeoutError) as err:
            logger.warning("job %s: re-submission as %s failed: %r", old_id, stream.job.job_id, err)
            pushed = False
        if pushed:
            logger.warning(
                "job %s ended: failover re-submission (queued, never claimed, missing on the new master); "
                "queued again as %s",
                old_id,
                stream.job.job_id,
                extra={"job_id": old_id, "request_id": stream.job.request_id},
            )
            self.metrics.jobs.labels("resubmitted").inc()
            return
        stream.queue.put_nowait(
            protocol.error_event(
                protocol.ANY_SEQ, ErrorCode.REDIS_UNAVAILABLE, "The job queue failed over and lost this job."
            )
        )

    async def _listen(self) -> None:
        assert self._pubsub is not None
        while True:
            try:
                message = await self._pubsub.get_message(timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the connection dropped: redis-py reconnects and resubscribes on next read
                # Not a reason to fail the open streams: only events published while it is down are lost, and
                # the audit after the reconnection finds the jobs that need it.
                self._connection_lost(err)
                await asyncio.sleep(0.2)
                continue
            if message is None:
                continue
            kind = message["type"]
            if kind == "message":
                try:
                    event = protocol.Event.decode(message["data"])
                except (ValueError, KeyError, TypeError, AttributeError) as err:
                    # Anything may publish on the channel: one bad message must not end the listener.
                    logger.error("dispatch listener: dropping a malformed reply message: %r", err)
                    continue
                stream = self._streams.get(event.job_id)
                if stream is not None:
                    stream.queue.put_nowait(event)
            elif kind == "subscribe":
                # Also after redis-py resubscribed on a reconnect.
                self._connection_back()


def _field(state: dict[Any, Any], name: str) -> str | None:
    """One field of a job's hash as read by a client that decodes nothing."""
    value = state.get(name.encode(), state.get(name))
    return None if value is None else _text(value)


def _terminal_of(state: dict[Any, Any], seen: int) -> protocol.Event | None:
    """The terminal event a job's hash records, for a stream that holds ``seen`` events; None while it runs.

    A record with more events than ``seen`` means chunks were lost on the way: it comes back as ``lost_events``.
    """
    meta: dict[str, Any] = {_text(k): _text(v) for k, v in state.items()}
    kind = meta.pop("state", None)  # absent while the job is queued or running
    if kind is None:
        return None
    recorded = meta.pop(protocol.SEQ_FIELD, None)
    for name in (protocol.STARTED_FIELD, protocol.OWNER_FIELD):
        meta.pop(name, None)
    if recorded is not None and int(recorded) not in (seen, protocol.ANY_SEQ):
        message = f"Audio events were lost (the job sent {recorded}, {seen} arrived)."
        return protocol.error_event(protocol.ANY_SEQ, ErrorCode.LOST_EVENTS, message)
    return protocol.Event("done" if kind == "done" else "error", seen, meta)


DISPATCHER: Final = web.AppKey("dispatcher", Dispatcher)
