"""One Wyoming connection: its events in, realtime jobs through :class:`SynthesisService`, audio events out.

Three tasks share a connection. The reader (:meth:`Session.run`) parses events and turns them into work items, in
order; the submitter queues each piece as a realtime job (an answer's first piece alone until its audio begins, then
at most :data:`LOOKAHEAD` unfinished at once, so the next sentence is made while the previous one is sent, yet one
connection cannot take every worker); the forwarder sends each job's audio and the answers' framing in the order
the requests came.

* ``synthesize`` outside a stream: one job for the whole text, answered by exactly one ``audio-start`` … ``audio-stop``
  cycle (Home Assistant reads up to the first ``audio-stop``), its audio sent as each sentence is made.
* ``synthesize-start``, ``synthesize-chunk``\\*, ``synthesize-stop``: each sentence is a job as soon as it is
  complete (:mod:`zsynth.speech.wyoming.text`), answered by its own audio cycle, all in one format; a ``synthesize``
  inside the stream (Home Assistant repeats the whole text in one) is ignored; ``synthesize-stopped`` always ends the
  stream, after an ``error`` too.
* Audio is 16-bit mono PCM at the engine's rate, in ``audio-chunk`` events of :data:`SAMPLES_PER_CHUNK` samples.

Wyoming carries no credential: every connection acts in the workspace ``ZSYNTH_WYOMING_WORKSPACE`` (``default``
unless set; :mod:`zsynth.core.workspaces`): ``describe`` lists that workspace's clones only, a voice id of another
workspace's clone is refused as an unknown one, and every job counts against that workspace's queue owner
(:func:`~zsynth.core.workspaces.queue_owner`), so Home Assistant has one share of the queue like a key.
A client that goes away (end of stream, reset) or stops reading for ``ZSYNTH_WRITE_TIMEOUT`` ends the connection, and
every job it still had is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from zsynth.core.codes import ApiCode, CodedError
from zsynth.core.engines import profile
from zsynth.core.text.bounds import OutputEstimate
from zsynth.core.text.prepare import TextOptions
from zsynth.core.workspaces import queue_owner
from zsynth.services.keys import SETTINGS
from zsynth.services.synthesis import Speech, SynthesisFailed, SynthesisRequest, SynthesisService, unreachable
from zsynth.services.voices import VOICES
from zsynth.speech.wyoming.events import AudioFrames, FrameError, WireEvent, encode_event, read_event
from zsynth.speech.wyoming.info import info as describe
from zsynth.speech.wyoming.text import SentenceStream, plain_text

logger = logging.getLogger(__name__)

LOOKAHEAD: Final = 2
SAMPLES_PER_CHUNK: Final = 1024  # as wyoming-piper
MAX_OPEN_ANSWERS: Final = 4  # answers one connection may have under way (the rest are refused with an error event)


class Refused(CodedError):
    """An event this connection does not take: an ``error`` event is sent and the connection goes on."""


class Closing(Exception):
    """The connection ends now (the client stopped reading, went away, or a plain answer failed)."""


@dataclass(eq=False)
class Answer:
    """One request's answer: a plain ``synthesize`` or a stream."""

    streaming: bool
    voice_id: str
    failed: bool = False
    opened: bool = False  # a plain answer's audio-start went out
    chars: int = 0  # a stream's text so far
    asked: OutputEstimate = OutputEstimate()  # what a stream's text so far asks of the engine (its output bounds)
    submitted: bool = False  # its first piece is queued
    # Its first piece's audio began (or that piece ended): until then no other piece of it is queued.
    heard: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True, slots=True)
class Piece:
    """Text of an answer to speak as one job."""

    answer: Answer
    text: str


@dataclass(frozen=True, slots=True)
class Failed:
    """An answer failed (its job, or its stream's text bound): one error event, in order with its audio."""

    answer: Answer
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class End:
    """The end of an answer: ``audio-stop`` (plain) or ``synthesize-stopped`` (stream)."""

    answer: Answer


@dataclass(frozen=True, slots=True)
class Queued:
    """A piece's job, queued."""

    answer: Answer
    speech: Speech


Item = Piece | Failed | End
Ready = Queued | Failed | End | Piece  # a Piece here belongs to an answer that failed: it is dropped


def _text_field(data: dict[str, Any], event: str) -> str:
    text = data.get("text")
    if not isinstance(text, str):
        raise Refused(ApiCode.INVALID_EVENT, f"'{event}' needs 'text' as a string.")
    return text


def _voice_name(data: dict[str, Any], event: str) -> str | None:
    voice = data.get("voice")
    if voice is None:
        return None
    if not isinstance(voice, dict):
        raise Refused(ApiCode.INVALID_EVENT, f"'{event}': 'voice' must be an object.")
    name = voice.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise Refused(ApiCode.INVALID_EVENT, f"'{event}': 'voice.name' must be a voice name from the info.")
    return name.strip() if isinstance(name, str) else None


class Session:
    """One client connection."""

    def __init__(self, app: web.Application, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.app = app
        self.settings = app[SETTINGS]
        self.reader = reader
        self.writer = writer
        self.id = f"wyoming-{secrets.token_hex(6)}"
        # The audio goes at the rate the engine makes it (its profile's), never resampled.
        self.frames = AudioFrames(profile(self.settings.engine).sample_rate, SAMPLES_PER_CHUNK)
        self.last_activity = time.monotonic()
        self._service = SynthesisService.of(app)
        self._stream: Answer | None = None
        self._sentences = SentenceStream()
        self._open = 0  # answers under way (queued, spoken or a stream still taking text)
        self._busy = 0  # items queued or being spoken: the idle deadline waits while there are any
        self._items: asyncio.Queue[Item] = asyncio.Queue()
        self._ready: asyncio.Queue[Ready] = asyncio.Queue()
        self._slots = asyncio.Semaphore(LOOKAHEAD)
        self._live: set[Speech] = set()
        self._drain_lock = asyncio.Lock()
        self._closed = asyncio.Event()
        self._abort = False  # the client stopped reading or went away: the connection is dropped, not closed
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
            "synthesize": self._synthesize,
            "synthesize-start": self._start,
            "synthesize-chunk": self._chunk,
            "synthesize-stop": self._stop,
        }

    # ----- the reader ------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until the client leaves, idles out or breaks the framing; then cancel its jobs."""
        tasks = [
            asyncio.create_task(self._submit_loop(), name=f"{self.id}-submit"),
            asyncio.create_task(self._forward_loop(), name=f"{self.id}-forward"),
        ]
        try:
            await self._read_loop()
        except FrameError as err:
            logger.info("%s: %s: %s; closing", self.id, err.code, err.message)
            with contextlib.suppress(Closing):
                await self._write(encode_event("error", {"text": err.message, "code": err.code}))
        except Closing:
            pass
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for speech in list(self._live):
                await speech.close("client gone: its Wyoming connection closed")
            self._live.clear()
            if self._abort:
                self.writer.transport.abort()  # it reads nothing: what is still buffered for it would never go
            else:
                self.writer.close()

    async def _read_loop(self) -> None:
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            while True:
                event = await self._next_event(closed)
                if event is None:
                    return
                self.last_activity = time.monotonic()
                try:
                    await self._handle(event)
                except Refused as err:
                    logger.info("%s: %s refused: %s", self.id, event.type, err.message)
                    await self._write(encode_event("error", {"text": err.message, "code": err.code}))
                if event.type == "describe":
                    info = describe(self.settings.engine, self.app.get(VOICES), self.settings.wyoming.workspace)
                    await self._write(encode_event("info", info))
                elif event.type == "ping":
                    await self._write(encode_event("pong", {"text": event.data.get("text")}))
        finally:
            closed.cancel()

    async def _next_event(self, closed: asyncio.Future[Any]) -> WireEvent | None:
        """The next event, None when the client left, the session is closing or it was idle too long."""
        idle = self.settings.wyoming.idle_timeout_s
        read = asyncio.ensure_future(read_event(self.reader))
        try:
            while True:
                left = self.last_activity + idle - time.monotonic()
                done, _ = await asyncio.wait(
                    {read, closed}, timeout=max(0.0, left), return_when=asyncio.FIRST_COMPLETED
                )
                if read in done:
                    return read.result()
                if closed in done:
                    return None
                if self._busy:
                    self.last_activity = time.monotonic()  # an answer under way is activity
                elif time.monotonic() - self.last_activity >= idle:
                    logger.info("%s: idle for %gs; closing", self.id, idle)
                    return None
        finally:
            if not read.done():
                read.cancel()

    async def _handle(self, event: WireEvent) -> None:
        """Turn one event into work items; Refused for an event this connection does not take."""
        handler = self._handlers.get(event.type)
        # Anything else (describe and ping are answered by the reader, select-program names the one program) is
        # dropped, as Wyoming servers do with events they do not know.
        if handler is not None:
            await handler(event.data)

    async def _synthesize(self, data: dict[str, Any]) -> None:
        if self._stream is not None:
            return  # the whole text again, sent inside a stream for older servers: already spoken piece by piece
        text, voice = _text_field(data, "synthesize"), _voice_name(data, "synthesize")
        limit = self.settings.limits.max_text_chars
        if len(text) > limit:
            raise Refused(ApiCode.MAX_CHARACTER_LIMIT_EXCEEDED, f"'text' may hold at most {limit} characters.")
        self._open_answer()
        answer = Answer(streaming=False, voice_id=voice or self._default_voice())
        spoken = plain_text(text)
        if spoken:  # no text: an empty audio cycle
            self._put(Piece(answer, spoken))
        self._put(End(answer))

    async def _start(self, data: dict[str, Any]) -> None:
        if self._stream is not None:
            raise Refused(ApiCode.STREAM_ALREADY_STARTED, "A stream is open: send synthesize-stop before a new start.")
        voice = _voice_name(data, "synthesize-start")
        self._open_answer()
        self._stream = Answer(streaming=True, voice_id=voice or self._default_voice())
        self._sentences = SentenceStream()

    async def _chunk(self, data: dict[str, Any]) -> None:
        text = _text_field(data, "synthesize-chunk")
        stream = self._stream
        if stream is None:
            raise Refused(ApiCode.NO_STREAM, "synthesize-chunk before synthesize-start.")
        if stream.failed:
            return
        stream.chars += len(text)
        if stream.chars > self.settings.limits.max_text_chars:
            stream.failed = True
            message = f"A stream may hold at most {self.settings.limits.max_text_chars} characters."
            self._put(Failed(stream, ApiCode.MAX_CHARACTER_LIMIT_EXCEEDED, message))
            return
        if not await self._admit(stream, text):
            return
        for piece in self._sentences.feed(text):
            self._put(Piece(stream, piece))

    async def _admit(self, stream: Answer, text: str) -> bool:
        """Whether a stream's text so far, ``text`` included, passes the output bounds of one request, checked before
        the chunk's pieces are queued (each is a job of its own, checked again as it is built); if not, the stream
        fails at once, so none of its pieces still to come is spoken."""
        try:
            stream.asked = await self._service.admit(
                [text], TextOptions(), workspace=self.settings.wyoming.workspace, before=stream.asked
            )
            return True
        except SynthesisFailed as err:
            failure = err.failure
            logger.info("%s: stream refused: %s", self.id, failure.message)
        except Exception:  # a defect (in text preparation, say): its traceback goes to the log, not the client
            logger.exception("%s: could not check a stream's text", self.id)
            failure = unreachable()
        stream.failed = True
        self._put(Failed(stream, failure.realtime_code, failure.message))
        return False

    async def _stop(self, data: dict[str, Any]) -> None:
        stream = self._stream
        if stream is None:
            raise Refused(ApiCode.NO_STREAM, "synthesize-stop without synthesize-start.")
        if not stream.failed:
            for piece in self._sentences.finish():
                self._put(Piece(stream, piece))
        self._put(End(stream))
        self._stream = None

    def _open_answer(self) -> None:
        if self._open >= MAX_OPEN_ANSWERS:
            raise Refused(
                ApiCode.TOO_MANY_REQUESTS, f"At most {MAX_OPEN_ANSWERS} answers may be under way on a connection."
            )
        self._open += 1

    def _default_voice(self) -> str:
        catalog = self.app.get(VOICES)
        return catalog.swapout() if catalog is not None else "default"

    def _put(self, item: Item) -> None:
        self._busy += 1
        self._items.put_nowait(item)

    # ----- the submitter and the forwarder ---------------------------------------------------------------------

    async def _submit_loop(self) -> None:
        while True:
            item = await self._items.get()
            if not isinstance(item, Piece) or item.answer.failed:
                await self._ready.put(item)
                continue
            await self._slots.acquire()
            request = SynthesisRequest(
                text=item.text,
                voice_id=item.answer.voice_id,
                output_format=f"pcm_{self.frames.rate}",
                request_id=self.id,
                workspace=self.settings.wyoming.workspace,
                options=TextOptions(),
                priority="realtime",
            )
            try:
                speech = await self._service.speak(request, owner=queue_owner(self.settings.wyoming.workspace))
            except SynthesisFailed as err:
                self._slots.release()
                logger.info("%s: piece not queued: %s", self.id, err.failure.message)
                await self._ready.put(Failed(item.answer, err.failure.realtime_code, err.failure.message))
                continue
            except Exception:  # a defect (in text preparation, say): its traceback goes to the log, not the client
                self._slots.release()
                logger.exception("%s: could not build or queue a piece", self.id)
                failure = unreachable()
                await self._ready.put(Failed(item.answer, failure.realtime_code, failure.message))
                continue
            self._live.add(speech)
            await self._ready.put(Queued(item.answer, speech))
            if not item.answer.submitted:
                # The first piece of an answer is made alone: a second job beside it would share the cores with it
                # and delay the first audio, the figure a listener waits on. Later pieces go LOOKAHEAD at a time.
                item.answer.submitted = True
                await item.answer.heard.wait()

    async def _forward_loop(self) -> None:
        try:
            while True:
                item = await self._ready.get()
                try:
                    if isinstance(item, Queued):
                        await self._speak(item.answer, item.speech)
                    elif isinstance(item, Failed):
                        await self._fail(item.answer, item.code, item.message)
                    elif isinstance(item, End):
                        await self._end(item.answer)
                finally:
                    self._busy -= 1
                    self.last_activity = time.monotonic()
        except Closing:
            self._closed.set()
        except Exception:  # a defect must not leave the client waiting for its idle deadline
            logger.exception("%s: forwarding failed", self.id)
            self._closed.set()

    async def _speak(self, answer: Answer, speech: Speech) -> None:
        """Send one job's audio (a stream's piece gets an audio cycle of its own)."""
        job_id = speech.job.job_id
        cycle = False
        try:
            if answer.failed:
                return
            async for event in speech.chunks():
                if answer.failed:
                    return  # its stream failed meanwhile (past its text bound): the rest is not spoken
                if not event.audio:
                    continue
                head = b""
                if answer.streaming and not cycle:
                    head, cycle = self.frames.start, True
                elif not answer.streaming and not answer.opened:
                    head, answer.opened = self.frames.start, True
                await self._write(head + self.frames.chunks(event.audio))
                answer.heard.set()
            if cycle:
                await self._write(self.frames.stop)
        except SynthesisFailed as err:
            failure = err.failure
            logger.info("%s: job %s failed: %s (%s)", self.id, job_id, failure.kind, failure.reason)
            if cycle:
                await self._write(self.frames.stop)
            await self._fail(answer, failure.realtime_code, failure.message)
        finally:
            answer.heard.set()
            await speech.close("client gone: its Wyoming connection closed")
            self._live.discard(speech)
            self._slots.release()

    async def _fail(self, answer: Answer, code: str, message: str) -> None:
        """The answer's one error event; a plain answer also ends the connection, as wyoming-piper does."""
        answer.failed = True
        await self._write(encode_event("error", {"text": message, "code": code}))
        if not answer.streaming:
            raise Closing

    async def _end(self, answer: Answer) -> None:
        self._open -= 1
        if answer.streaming:
            await self._write(encode_event("synthesize-stopped"))
        elif not answer.failed:
            await self._write((b"" if answer.opened else self.frames.start) + self.frames.stop)

    async def _write(self, data: bytes) -> None:
        """Write and wait until the client takes it; Closing when it went away or read nothing for 10 s."""
        if self._closed.is_set() or self.writer.is_closing():
            raise Closing
        try:
            self.writer.write(data)
            # The write deadline every transport shares (docs/architecture.md, "Flow control").
            async with self._drain_lock, asyncio.timeout(self.settings.flow.write_timeout_s):
                await self.writer.drain()
        except (ConnectionError, TimeoutError) as err:
            logger.info("%s: write failed (%r); closing", self.id, err)
            self._abort = True
            self._closed.set()
            raise Closing from err
        self.last_activity = time.monotonic()
