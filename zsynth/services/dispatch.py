"""The front's side of the job protocol: submit a job, then read its events with deadlines.

One front process holds one pub/sub connection, subscribed (and confirmed by Redis) at start to the front's own
reply channel. Every job names that channel, and every event names its job, so a single listener task demultiplexes
the events into per-job queues with no pub/sub traffic per job.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, Final

from aiohttp import web
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from zsynth.core import protocol
from zsynth.core.config import Settings
from zsynth.core.protocol import ErrorCode
from zsynth.core.supervise import Supervisor
from zsynth.services.metrics import Metrics

logger = logging.getLogger(__name__)


async def _pass_through(response: Any) -> Any:
    return response


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class JobFailed(Exception):
    """A job ended in an error event (or its deadline); carries the machine code and the message.

    ``code`` is an :class:`~zsynth.core.protocol.ErrorCode` value, or whatever code a (newer) worker sent.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _share_full(limit: int) -> JobFailed:
    return JobFailed(ErrorCode.QUEUE_FULL, f"This key already has {limit} jobs queued or running here; retry shortly.")


class JobStream:
    """The events of one submitted job, read with the first-chunk and per-chunk deadlines.

    Use as an async context manager: leaving it before the terminal event cancels the job (the client went away).
    """

    def __init__(self, dispatcher: Dispatcher, job: protocol.Job, owner: str | None = None) -> None:
        self.dispatcher = dispatcher
        self.job = job
        self.queue: asyncio.Queue[protocol.Event] = asyncio.Queue()
        self.finished = False
        self.terminal: protocol.Event | None = None
        self.first_chunk_at: float | None = None
        self.submitted_at = time.monotonic()
        self._expected_seq = 0
        self.owner = owner  # the credential whose share of the queue this job counts against

    async def __aenter__(self) -> JobStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop listening; cancel the job unless it already ended."""
        if not self.finished:
            self.finished = True
            self._record(ErrorCode.CANCELLED)
            await self.dispatcher.cancel(self.job.job_id)
        await self.dispatcher.release(self.job.job_id)

    async def next_event(self) -> protocol.Event:
        """The next event, or JobFailed(timeout) when the deadline for it passes."""
        settings = self.dispatcher.settings
        timeout = settings.first_chunk_timeout_s if self._expected_seq == 0 else settings.chunk_timeout_s
        try:
            event = await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            recovered = await self.dispatcher.recover_terminal(self.job.job_id, self._expected_seq)
            if recovered is None:
                self.finished = True
                self._record(ErrorCode.TIMEOUT)
                await self.dispatcher.cancel(self.job.job_id)
                raise JobFailed(
                    ErrorCode.TIMEOUT, f"No audio from the engine within {timeout:g} s; the service may be overloaded."
                ) from None
            event = recovered
        if event.seq != self._expected_seq and not (event.terminal and event.seq == protocol.ANY_SEQ):
            raise JobFailed(
                ErrorCode.LOST_EVENTS, f"Audio events were lost (expected #{self._expected_seq}, got #{event.seq})."
            )
        self._expected_seq += 1
        waited = event.meta.get("waited_s")
        if waited is not None:
            # The first chunk of each part says how long that part waited for a slot (see workers.worker).
            part = "first" if int(event.meta.get("part", 0)) == 0 else "resumed"
            self.dispatcher.metrics.slot_wait.labels(self.job.priority, part).observe(float(waited))
        if event.terminal:
            self.finished = True
            self.terminal = event
            self._record("done" if event.kind == "done" else str(event.meta.get("code", ErrorCode.ERROR)), event)
        elif self.first_chunk_at is None:
            self.first_chunk_at = time.monotonic()
            self.dispatcher.metrics.ttfa.labels(self.job.priority).observe(self.first_chunk_at - self.submitted_at)
        return event

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
        self._subscribed: asyncio.Event = asyncio.Event()
        # The one reply listener is vital: while it is down no job of this front gets its audio (/readyz says so).
        self.supervisor = supervisor or Supervisor()
        self._push = redis.register_script(protocol.PUSH_BOUNDED_LUA)
        # Unfinished jobs per credential fingerprint, and a condition to wait on for a share to free up.
        self._owned: collections.Counter[str] = collections.Counter()
        self._share_freed = asyncio.Condition()

    async def start(self) -> None:
        """Subscribe to this front's reply channel, start the listener, and wait until Redis confirms."""
        # redis-py's default push handler formats every message (audio included) for a debug log line it then
        # drops; on a busy front that was a quarter of the CPU. An identity handler skips it.
        self._pubsub = self.redis.pubsub(push_handler_func=_pass_through)
        await self._pubsub.subscribe(self.reply_channel)
        self.supervisor.spawn("dispatch-listener", self._listen)
        await asyncio.wait_for(self._subscribed.wait(), 10.0)
        logger.info("dispatcher %s listening on %s", self.front_id, self.reply_channel)

    async def close(self) -> None:
        """Stop the listener and fail every waiting stream."""
        await self.supervisor.close()
        self._fail_all(ErrorCode.SHUTTING_DOWN, "The server is shutting down.")
        if self._pubsub is not None:
            await self._pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated

    @property
    def in_flight(self) -> int:
        """Jobs submitted by this front that have not ended."""
        return len(self._streams)

    @property
    def share_limit(self) -> int:
        """Unfinished jobs one credential may have from this front: ZSYNTH_CREDENTIAL_QUEUE_SHARE of the queue."""
        return max(1, int(self.settings.credential_queue_share * self.settings.max_queue))

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
            self._owned[owner] += 1
        if not job.start_deadline:
            # A job still queued when its client has given up waiting is dropped unrun.
            job.start_deadline = time.time() + self.settings.first_chunk_timeout_s
        job.reply_to = self.reply_channel
        stream = JobStream(self, job, owner)
        self._streams[job.job_id] = stream
        try:
            # Realtime segments go ahead of batch jobs, new batch jobs ahead of remainders (protocol.PUSH_BOUNDED_LUA).
            pushed = await self._push(
                keys=[protocol.QUEUE, protocol.REALTIME_TAIL, protocol.BATCH_TAIL],
                args=[job.to_json(), self.settings.max_queue, job.priority],
            )
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

    async def cancel(self, job_id: str) -> None:
        """Tell the workers this job's client is gone: skip it if queued, stop it if running."""
        with contextlib.suppress(Exception):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.set(protocol.cancel_key(job_id), b"1", ex=self.settings.job_ttl_s)
                pipe.publish(protocol.CANCEL_CHANNEL, job_id)
                await pipe.execute()
            logger.info("job %s cancelled by the front", job_id)

    async def release(self, job_id: str) -> None:
        """Forget a job: events that still arrive for it are dropped; its credential's share is given back."""
        stream = self._streams.pop(job_id, None)
        if stream is not None and stream.owner is not None:
            await self._give_share(stream.owner)

    async def recover_terminal(self, job_id: str, seq: int) -> protocol.Event | None:
        """After a missed deadline, read the job's terminal record in case its event was missed."""
        with contextlib.suppress(Exception):
            state = await self.redis.hgetall(protocol.job_key(job_id))
            meta: dict[str, Any] = {_text(k): _text(v) for k, v in state.items()}
            kind = meta.pop("state", None)  # absent while the job is queued or running
            if kind is not None:
                return protocol.Event("done" if kind == "done" else "error", seq, meta)
        return None

    def _fail_all(self, code: ErrorCode, message: str) -> None:
        """End every waiting stream: events published while the connection was down are lost."""
        for stream in self._streams.values():
            stream.queue.put_nowait(protocol.error_event(protocol.ANY_SEQ, code, message))

    async def _listen(self) -> None:
        assert self._pubsub is not None
        while True:
            try:
                message = await self._pubsub.get_message(timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the connection dropped: redis-py reconnects and resubscribes on next read
                logger.warning("dispatch listener lost redis: %s", err)
                self._fail_all(ErrorCode.REDIS_UNAVAILABLE, "The connection to the job queue was lost; retry shortly.")
                await asyncio.sleep(0.5)
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
                self._subscribed.set()


DISPATCHER: Final = web.AppKey("dispatcher", Dispatcher)
