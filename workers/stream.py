"""One stream on a worker: a claimed job, its engine generator held open, its progress and its terminal event.

The worker holds several streams and computes them chunk by chunk (``workers/worker.py``, ``workers/scheduler.py``).
A stream's work is one generator (:meth:`Stream._produce`), advanced one step at a time, always from the worker's one
engine thread: a step computes the engine's next chunk (the engine's ``synthesize`` generator is the resumable
stream: open it, ``next()`` it, ``close()`` it), encodes it and publishes it within the job's flow-control credit. A
chunk past the credit is kept and the stream is *parked*: it is not scheduled again until its front grants more
(the worker's loop reads the credit list), so a client that does not read holds no slot.

A batch job is still spoken one piece (whole sentences, at most ZSYNTH_PIECE_MAX_CHARS) at a time: after each piece
but the last, when its worker takes no new stream and the next job in the queue is realtime or has not started, the
stream yields (it flushes its encoder, puts the rest of the job back in the queue and claims the waiting job in the
same atomic step, as before streams were interleaved).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from redis import Redis as SyncRedis
from redis.commands.core import Script

from zsynth.core import protocol
from zsynth.core.audio import Encoder, OutputFormat
from zsynth.core.config import Settings
from zsynth.core.engines import profile
from zsynth.core.protocol import ErrorCode

from .engines import Engine, EngineChunk, VoiceSpec
from .flow import CreditGate
from .memory import TOO_COMPLEX_MESSAGE, JobGuard
from .metrics import StreamFigures, WorkerMetrics
from .synthesis import YIELDING_CODECS, ChunkMeta, first_piece, rest_piece, speak_cut, text_pieces
from .voice_sync import VoiceUnavailable


def _visible(text: str) -> int:
    """Characters of ``text`` other than white space."""
    return sum(1 for ch in text if not ch.isspace())


class JobLog(logging.LoggerAdapter[logging.Logger]):
    """Prefixes every line with the job id and the worker id."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        assert self.extra is not None
        kwargs["extra"] = {**self.extra, **kwargs.get("extra", {})}  # JSON logs carry the ids as fields
        return f"[job {self.extra['job_id']} worker {self.extra['worker_id']}] {msg}", kwargs


class Step(enum.Enum):
    """What one step of a stream did."""

    SENT = "sent"  # a chunk went out
    PARKED = "parked"  # a chunk waits for credit; the stream is not scheduled until it comes


@dataclass(slots=True)
class StreamHost:
    """What every stream of a worker shares: its settings, engine, blocking Redis client, scripts and guards."""

    settings: Settings
    engine: Engine
    chunk_redis: SyncRedis  # the engine thread's blocking client
    metrics: WorkerMetrics
    memory: JobGuard
    processing: str  # the worker's in-flight list
    voice_spec: Callable[[str], VoiceSpec]
    should_yield: Script
    yield_slot: Script
    # Whether a batch stream may give its place to a waiting job: the worker takes no new stream and is not stopping.
    may_yield: Callable[[], bool]
    forced: Callable[[], bool]  # a second stop signal came
    # Whether the slot is shared (another stream held now or a moment ago): a Piper rest is then cut once more.
    shared: Callable[[], bool]

    @property
    def hard_audio_s(self) -> float:
        """The most audio one job may make: twice the front's estimate bound (ZSYNTH_MAX_AUDIO), which reads fast."""
        return 2 * self.settings.limits.max_audio_s


class Stream:
    """One claimed job on its worker: claim, run (step by step), progress and terminal record."""

    def __init__(self, host: StreamHost, job: protocol.Job, raw: bytes, fmt: OutputFormat, log: JobLog) -> None:
        self.host = host
        self.job = job
        self.raw = raw  # its JSON as claimed: how it is found in the in-flight list
        self.fmt = fmt
        self.log = log
        self.abort = threading.Event()  # read by the engine between its calls, and by this stream between chunks
        self.seq = job.seq  # the next sequence number
        self.samples = job.sample_offset  # engine samples published, earlier parts included
        self.gate = CreditGate(host.chunk_redis, job, host.settings.flow.wait_s, self.abort)
        self.figures: StreamFigures = host.metrics.claimed(job)
        self.started = time.time()
        # Its deadline before its first chunk: when it was queued, plus the first-audio budget of its priority.
        settings = host.settings
        budget = (
            settings.jobs.first_audio_budget_s
            if job.priority == "realtime"
            else settings.jobs.batch_first_audio_budget_s
        )
        queued_for = max(0.0, time.time() - (job.queued_at or job.created_at))
        self.first_due = time.monotonic() - queued_for + budget
        self.first_sent_at: float | None = None  # monotonic, when this part's first chunk went out
        # When its listener's playback runs dry (monotonic): it starts a jitter buffer after the first chunk went out,
        # grows by each chunk's audio, and restarts when a chunk goes out after it (the listener heard a gap).
        self.dry_at = 0.0
        # The stream whose audio this one's plays right after (Job.follows, held by this worker): this one waits
        # until that one is made. Then ``anchor`` is where that one's playback ends: this one's playback continues it.
        self.after: Stream | None = None
        self.anchor: float | None = None
        self.sent_samples = 0  # engine samples this part published
        self.parked = False  # its next chunk waits for credit
        self.pending_bytes = 0  # the size of that chunk
        self.finished = False  # its work generator returned or raised: its terminal is to be recorded
        self.error: Exception | None = None  # what the work raised
        self.memory_over = False  # a step of it took the worker's RSS past the ceiling
        self.owned = True  # False when the memory guard recorded its end (the process is exiting)
        self.handed_to: bytes | None = None  # yielded: the JSON of the job claimed in its place
        self.yielded = False
        self.too_long = False  # stopped at the hard bound on audio per job
        self._work: Generator[Step, None, None] | None = None
        # Characters (white space aside) of the job's text and of the chunks made so far: when they meet, the text is
        # spoken and the next step only ends the stream (closes the engine's generator, flushes the encoder, sends the
        # terminal event), so it goes first (``finishing``).
        self._text_chars = _visible(job.text)
        self._made_chars = 0

    # ----- what the scheduler reads ----------------------------------------------------------------------------

    @property
    def deadline(self) -> float:
        """When its listener's playback would run dry (monotonic): its first chunk's time plus the jitter buffer plus
        the audio sent (from the last gap, if it had one); before its first chunk, when it was queued plus the
        first-audio budget."""
        return self.first_due if self.first_sent_at is None else self.dry_at

    @property
    def owner(self) -> str:
        """Whose turn it takes: the key its job counts against (fair shares between owners, in an overload)."""
        return self.job.owner

    @property
    def runnable(self) -> bool:
        """Whether a step may run now: not parked, and the stream it follows made (an aborted or given-up stream
        runs, to end)."""
        if self.finished:
            return False
        if self.abort.is_set() or self.gate.stalled:
            return True
        return not self.parked and self.after is None

    def follow(self, played_until: float | None) -> None:
        """The stream this one follows was made: this one's playback continues where that one's ends (monotonic;
        None when that one sent nothing), which is also when this one's first chunk is due."""
        self.after = None
        if played_until is not None:
            self.anchor = played_until
            self.first_due = played_until

    @property
    def finishing(self) -> bool:
        """Whether the whole text has been spoken and sent: the next step only ends the stream (a moment's work)."""
        return self._made_chars >= self._text_chars and self.published and not self.parked

    def credit_arrived(self) -> bool:
        """Whether the parked chunk may go now (the loop asks after reading the credit list)."""
        return self.gate.allows(self.pending_bytes)

    # ----- the engine thread -----------------------------------------------------------------------------------

    def step(self) -> tuple[float, float]:
        """In the engine thread: advance the stream by one chunk; return the slot seconds it took and the seconds
        of audio the engine made. Sets ``finished`` (and ``error``) when its work ended."""
        started = time.perf_counter()
        made = self.figures.samples
        host = self.host
        host.memory.begin(self.job, self.raw, lambda: self.seq, self.abort)
        try:
            if self._work is None:
                self._work = self._produce()
            if next(self._work) is Step.PARKED:
                self.parked = True
                self.gate.wait_from(time.monotonic())
            else:
                self.parked = False
        except StopIteration:
            self.finished = True
        except Exception as err:  # every error ends this stream only; the loop maps it to a terminal event
            self.finished = True
            self.error = err
        finally:
            self.owned = host.memory.finish()
            if host.memory.over:
                self.memory_over = True
                self.abort.set()
        if self.finished:
            self.close()
        return time.perf_counter() - started, (self.figures.samples - made) / host.engine.sample_rate

    def close(self) -> None:
        """In the engine thread: close the work generator, and with it the engine's stream (its state is freed)."""
        work, self._work = self._work, None
        if work is not None:
            work.close()

    def _produce(self) -> Generator[Step, None, None]:
        """Synthesise, encode and publish every chunk, one per step; park a chunk that waits for credit.

        Between pieces of a batch job, yield the slot when the worker is full and the next job in the queue should
        go first (SHOULD_YIELD_LUA).
        """
        host, job, settings = self.host, self.job, self.host.settings
        engine = host.engine
        encoder = Encoder(self.fmt, engine.sample_rate)
        metas = ChunkMeta(self.fmt, engine.sample_rate, job.alignment, continues=job.resumed)
        voice = host.voice_spec(job.voice_id)
        waited_s: float | None = round(max(0.0, time.time() - (job.queued_at or job.created_at)), 4)
        offset = job.sample_offset
        # A batch job gives way to any fresh job, a realtime segment to another owner's (SHOULD_YIELD_LUA); a segment
        # that fits in one piece (an agent's usual flush) is never cut.
        may_yield = self.fmt.codec in YIELDING_CODECS and (
            job.priority == "batch" or len(job.text) > settings.jobs.piece_max_chars
        )
        # Only a job that may yield is cut into pieces: the others go to the engine whole (one call, one seeding).
        pieces = text_pieces(job.text, settings.jobs.piece_max_chars) if may_yield else [job.text]
        # A job's first sentence may be spoken in two calls, the first one short (docs/scaling.md): not a remainder's.
        cuts_first = settings.jobs.first_piece and not job.resumed and profile(settings.engine).cuts_first_piece

        def speak(text: str) -> Iterator[EngineChunk]:
            # Timing only where an alignment goes out: without it Piper runs its faster, unpatched model.
            return engine.synthesize(
                text, voice, job.voice_settings, self.abort.is_set, seed=job.seed, timing=job.alignment
            )

        for index, piece in enumerate(pieces):
            if self.abort.is_set():
                return
            # While the slot is shared the first piece is shorter (2-3 words), and its rest cut once more (_recut);
            # asked only where a first piece is cut (another worker's busy mark is a file lock to test).
            first = cuts_first and index == 0
            cut = first_piece(piece, first, short=first and host.shared())
            made = speak_cut(speak, piece, cut, engine.sample_rate, recut=self._recut)
            for chunk in host.metrics.chunks(job, made, self.figures):
                audio = encoder.encode(chunk.pcm)
                meta = metas.chunk(chunk, audio, offset)
                if waited_s is not None:
                    # The part's first chunk says how long it waited for the slot (the front's slot-wait figure).
                    meta.update(part=job.part, waited_s=waited_s)
                    waited_s = None
                if not (yield from self._publish(audio, meta)):
                    return
                self._made_chars += _visible(chunk.text)
                offset += len(chunk.pcm)
                if offset > host.hard_audio_s * engine.sample_rate:
                    self.too_long = True
                    return
                if self.abort.is_set():
                    return
                yield Step.SENT
            rest = pieces[index + 1 :]
            if rest and may_yield and host.may_yield() and not self.abort.is_set():
                if host.should_yield(keys=[protocol.QUEUE], args=[job.priority, job.owner, job.turn]):
                    yield from self._finish_encoding(encoder, metas)
                    remainder = dataclasses.replace(
                        job,
                        sent_bytes=self.gate.sent,
                        consumed_bytes=self.gate.consumed,
                        granted_bytes=self.gate.granted,
                        text=" ".join(rest),
                        part=job.part + 1,
                        seq=self.seq,
                        sample_offset=offset,
                        total_chars=job.total_chars or len(job.text),
                        queued_at=time.time(),
                    )
                    self.handed_to = host.yield_slot(
                        keys=[protocol.QUEUE, host.processing], args=[self.raw, remainder.to_json(), job.priority]
                    )
                    self.yielded = True
                    return
        yield from self._finish_encoding(encoder, metas)

    def _recut(self, rest: str) -> tuple[str, str] | None:
        """In the engine thread, as a cut sentence's rest is about to be spoken: cut it once more while the slot is
        shared, so that another stream's next turn waits for a shorter call (docs/scheduling.md)."""
        return rest_piece(rest) if self.host.shared() else None

    def _finish_encoding(self, encoder: Encoder, metas: ChunkMeta) -> Generator[Step, None, None]:
        """Flush the encoder and publish what it held back (with the alignment still owed) as a last chunk."""
        tail = encoder.finish()
        tail_meta = metas.tail(tail)
        if tail_meta is not None:
            yield from self._publish(tail, tail_meta)

    def _publish(self, audio: bytes, meta: dict[str, Any]) -> Generator[Step, None, bool]:
        """Publish one chunk event within the job's credit (the first one also marks the job as started), parking
        the stream until the credit comes; False when the job must stop instead (cancelled, or its front takes
        nothing)."""
        gate = self.gate
        self.pending_bytes = len(audio)
        while not gate.allows(len(audio)):
            if self.abort.is_set() or gate.stalled:
                return False
            yield Step.PARKED
        gate.wait_over()
        gate.sent_chunk(len(audio))
        job, redis = self.job, self.host.chunk_redis
        event = protocol.Event("chunk", self.seq, meta, audio, job_id=job.job_id)
        if self.seq == 0:
            # Mark the job as started in the same round trip, and before its first audio goes out: a reaper never
            # re-runs a started job, and whoever hears the first chunk finds the job marked (a large chunk can reach
            # Redis in several reads, so a mark sent after it could land after a client's look).
            with redis.pipeline(transaction=False) as pipe:
                pipe.hset(protocol.job_key(job.job_id), protocol.STARTED_FIELD, str(time.time()))
                pipe.expire(protocol.job_key(job.job_id), self.host.settings.jobs.ttl_s)
                pipe.publish(job.reply_to, event.encode())
                pipe.execute()
        else:
            redis.publish(job.reply_to, event.encode())
        now = time.monotonic()
        if self.first_sent_at is None:
            self.first_sent_at = now
            # A turn's playback starts a jitter buffer after its first chunk lands; a following segment's goes on
            # from the previous one's.
            self.dry_at = now + self.host.settings.jobs.playback_jitter_s if self.anchor is None else self.anchor
        samples = int(meta.get("samples", 0))
        self.dry_at = max(self.dry_at, now) + samples / self.host.engine.sample_rate
        self.seq += 1
        self.samples += samples
        self.sent_samples += samples
        return True

    # ----- the end ---------------------------------------------------------------------------------------------

    @property
    def published(self) -> bool:
        """Whether any of this part's chunks went out."""
        return self.seq > self.job.seq

    def ending(self) -> protocol.Event | None:
        """The terminal event of a stream whose work ended (None: it yielded its slot)."""
        job, seq, err = self.job, self.seq, self.error
        if err is not None:
            if isinstance(err, MemoryError):
                self.log.error("synthesis ran out of memory")
                return protocol.error_event(seq, ErrorCode.INPUT_TOO_COMPLEX, TOO_COMPLEX_MESSAGE)
            if self.memory_over:  # what an engine raises while memory runs out is not the cause
                self.log.error("synthesis failed over the memory ceiling: %r", err)
                return protocol.error_event(seq, ErrorCode.INPUT_TOO_COMPLEX, TOO_COMPLEX_MESSAGE)
            if isinstance(err, VoiceUnavailable):  # never another voice instead
                self.log.error("voice refused: %s", err)
                return protocol.error_event(seq, err.code, str(err))
            self.log.error("synthesis failed: %r", err)
            return protocol.error_event(seq, ErrorCode.SYNTHESIS_FAILED, f"Synthesis failed: {err}")
        if self.memory_over:
            return protocol.error_event(seq, ErrorCode.INPUT_TOO_COMPLEX, TOO_COMPLEX_MESSAGE)
        if self.yielded:
            return None
        if self.gate.stalled:
            self.log.warning("stopped: %s", self.gate.stalled)
            return protocol.error_event(seq, ErrorCode.CLIENT_TOO_SLOW, f"The job was stopped: {self.gate.stalled}.")
        if self.too_long:
            bound = self.host.hard_audio_s
            self.log.warning("stopped at the hard bound of %g s of audio per job", bound)
            return protocol.error_event(
                seq,
                ErrorCode.AUDIO_TOO_LONG,
                f"The audio passed the bound of {bound:g} s per request; split the text.",
            )
        if self.abort.is_set():
            if self.host.forced():
                return protocol.error_event(seq, ErrorCode.WORKER_STOPPING, "The worker was stopped during this job.")
            return protocol.error_event(seq, ErrorCode.CANCELLED, "The job was cancelled.")
        return protocol.Event(
            "done",
            seq,
            {
                "samples": self.samples,
                "sample_rate": self.host.engine.sample_rate,
                "chars": job.total_chars or len(job.text),
            },
        )
