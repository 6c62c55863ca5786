"""One context's voice: its segments become realtime jobs, spoken in order, and their audio becomes socket frames.

Each segment is its own job on the worker pool, so a worker slot is held only while a segment is being made,
never for the socket's lifetime. At most :data:`LOOKAHEAD` segments of a context are submitted and unfinished at
once: the next one waits in the queue (realtime jobs go ahead of batch jobs) while the previous one's audio is
still being sent, so there is no gap between them, yet one talkative socket cannot take every worker.

Alignment times are integer ms relative to the frame they come with (ElevenLabs' documented default). With
``sync_alignment=true`` they count from the start of the context's audio instead, so they keep increasing across
frames and segments: the timeline a framework needs to turn characters into word timestamps (LiveKit's plugin
reads them that way and asks for ``sync_alignment=true``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from zsynth.core.alignment import CharAlignment, Timeline
from zsynth.core.codes import ApiCode
from zsynth.core.protocol import Event
from zsynth.core.text.prepare import TextOptions
from zsynth.core.text.spoken import AlignmentMapper
from zsynth.services.auth import workspace_of
from zsynth.services.keys import SETTINGS
from zsynth.services.synthesis import (
    Failure,
    Speech,
    SynthesisFailed,
    SynthesisRequest,
    SynthesisService,
    queue_owner,
    unreachable,
)
from zsynth.speech.ws.connection import Connection, StreamParams, WsError

logger = logging.getLogger(__name__)

LOOKAHEAD: Final = 2
# Raw audio per frame: base64 makes it 4/3 larger, alignment adds a few KiB; frames stay well under 1 MiB.
MAX_FRAME_AUDIO_BYTES: Final = 512 * 1024

OnDone = Callable[["Speaker"], Awaitable[None]]
#: Builds one audio frame's JSON text: audio, its alignment (camelCase keys), the context id, multi or not.
FrameBuilder = Callable[[bytes, "dict[str, Any] | None", "str | None"], str]


class Mark:
    """A point in a context's segments (a dialogue socket's flush): ``on_mark`` runs once everything queued before
    it has been sent."""


# The end of a segment that may be the start of a break tag whose rest is still to come (the buffer cuts at white
# space, and a tag has some): it waits for the next segment, or for the end of the context.
# The longest break tag start held for its rest (`<break time="10.0s" />` is 25 characters).
MAX_HELD_TAG_CHARS: Final = 100
_TAG_START: Final = re.compile(r"<(?:b|br|bre|brea|break(?:\s[^<>]*)?)?$", re.IGNORECASE)


class Speaker:
    """Speaks the segments of one context in order and forwards their audio to the socket."""

    def __init__(
        self,
        conn: Connection,
        params: StreamParams,
        voice_settings: dict[str, Any] | None,
        context_id: str | None,
        *,
        multi: bool,
        on_done: OnDone,
        options: TextOptions | None = None,
        frame: FrameBuilder | None = None,
        on_mark: Callable[[Mark], Awaitable[None]] | None = None,
    ) -> None:
        """``frame`` builds the audio frames (default: the TTS sockets' :func:`audio_frame`); ``on_mark`` runs at
        each :meth:`mark`, in order with the audio."""
        self.frame = frame or (lambda audio, alignment, context: audio_frame(audio, alignment, context, multi=multi))
        self.on_mark = on_mark
        self.conn = conn
        self.params = params
        self.voice_settings = voice_settings or {}
        self.context_id = context_id
        self.multi = multi
        self.on_done = on_done
        self.options = options or TextOptions()
        self._carry = ""  # a break tag's start, held for the rest of it
        # Jobs whose text was rewritten (normalization, dictionaries, break tags): their alignment is mapped back.
        self._mappers: dict[str, AlignmentMapper] = {}
        self._mapper: AlignmentMapper | None = None
        self.pending = 0  # segments accepted and not yet fully sent
        self.ended = False
        self.last_activity = time.monotonic()
        self._chars_sent = False
        self._audio_ms = 0.0  # audio already sent for this context: where the next frame starts
        self._sending = False  # inside a socket send, which must not be cut short (see interrupt)
        self._interrupted = False
        self._finisher: asyncio.Task[Any] | None = None  # the task sending the last frames and the close
        self._segments: asyncio.Queue[tuple[str, str | None] | Mark | None] = asyncio.Queue()
        self._queued_chars = 0  # characters in _segments (not yet submitted)
        self._owner = queue_owner(conn.credential)
        self._workspace = workspace_of(conn.credential)
        self._speeches: asyncio.Queue[Speech | Mark | None] = asyncio.Queue()
        self._slots = asyncio.Semaphore(LOOKAHEAD)
        self._live: set[Speech] = set()
        self._last_job = ""  # the job of the segment submitted last
        self._tasks = [
            asyncio.create_task(self._submit_loop(), name=f"ws-submit-{conn.socket_id}"),
            asyncio.create_task(self._forward_loop(), name=f"ws-forward-{conn.socket_id}"),
        ]

    @property
    def busy(self) -> bool:
        """Audio is still to come for text this context was given."""
        return self.pending > 0

    def touch(self) -> None:
        """Note activity on this context (resets its inactivity timer)."""
        self.last_activity = time.monotonic()

    def mark(self) -> Mark:
        """Queue a mark after the segments queued so far (see :class:`Mark`)."""
        mark = Mark()
        if not self.ended:
            self._segments.put_nowait(mark)
        return mark

    async def admit(self, texts: list[str]) -> None:
        """Check one client message's text against the output bounds of a request, before it is buffered.

        The buffer cuts a message into segments (at ZSYNTH_WS_MAX_WORD_CHARS where it has no white space), each its
        own job and checked as that job is built; without this check 10,000 digits in one message would pass as ten
        jobs of 1,000. WsError (``audio_limit_exceeded``, ``pause_limit_exceeded``) when the message passes them.
        """
        if self.ended or not any(text.strip() for text in texts):
            return
        try:
            await SynthesisService.of(self.conn.request.app).admit(texts, self.options, workspace=self._workspace)
        except SynthesisFailed as err:
            raise WsError(err.failure.realtime_code, err.failure.message) from err

    def speak(self, segment: str, voice_id: str | None = None) -> None:
        """Queue a segment (in ``voice_id``, by default the socket's voice); it is spoken after every segment queued
        before it.

        WsError when the context already holds ZSYNTH_WS_MAX_QUEUED_CHARS characters or
        ZSYNTH_WS_MAX_QUEUED_SEGMENTS segments not yet submitted: a client sending text much faster than it can be
        spoken would otherwise grow the queue without bound.
        """
        if self.ended:
            return
        if self._carry:
            # The buffer cuts at white space and strips it: put one back, unless the cut was inside the tag's name
            # (only auto_mode's message boundaries cut inside a word).
            inside_name = self._carry.lower() in ("<", "<b", "<br", "<bre", "<brea")
            segment = self._carry + ("" if inside_name else " ") + segment
            self._carry = ""
        held = _TAG_START.search(segment)
        # Only a tag's start is held: text after an unclosed "<break " is not, however long (the context's text
        # must stay bounded).
        if held is not None and len(segment) - held.start() <= MAX_HELD_TAG_CHARS:
            segment, self._carry = segment[: held.start()], segment[held.start() :]
            if not segment.strip():
                self._carry = segment + self._carry
                return
        settings = self.conn.request.app[SETTINGS]
        chars, segments = settings.ws.max_queued_chars, settings.ws.max_queued_segments
        if self._queued_chars + len(segment) > chars or self._segments.qsize() >= segments:
            raise WsError(
                ApiCode.MAX_CHARACTER_LIMIT_EXCEEDED,
                f"Too much text waiting to be spoken: at most {chars} characters in {segments} segments per context.",
            )
        self._queued_chars += len(segment)
        self.pending += 1
        self._segments.put_nowait((segment, voice_id))

    def end(self) -> None:
        """No more segments: once the queued ones are spoken, ``on_done`` runs."""
        if not self.ended:
            if self._carry.strip():  # an unfinished tag is spoken as the text it is
                self._queued_chars += len(self._carry)
                self.pending += 1
                self._segments.put_nowait((self._carry, None))
            self._carry = ""
            self.ended = True
            self._segments.put_nowait(None)

    async def cancel(self) -> None:
        """Stop now: drop queued segments and cancel the jobs already submitted (queued or running)."""
        self.ended = True
        if self._finisher is not None and self._finisher is not asyncio.current_task():
            # It is sending the final frame and closing: let it, briefly, instead of cutting the close short.
            await asyncio.wait([self._finisher], timeout=5.0)
        for task in self._tasks:
            task.cancel()
        await self._close_live("client gone: the socket or its context closed")

    async def interrupt(self) -> None:
        """Barge-in: stop now, but never in the middle of a frame; no audio is sent after this returns.

        Queued segments are dropped and the submitted jobs cancelled (a running one stops within one piece on its
        worker). A send already under way is let finish first: cancelling a socket write part way could corrupt
        the stream of frames the other contexts still use. A job being queued is cancelled by the synthesis service
        itself when its queueing is cut short.
        """
        self.ended = True
        self._interrupted = True
        submit, forward = self._tasks
        submit.cancel()  # it waits for a segment, a slot or the queue
        if not self._sending:
            forward.cancel()  # it waits for a segment or an event, never inside a send
        await self._close_live("cancelled by a barge-in")

    async def _close_live(self, reason: str) -> None:
        """Wait for both loops to end, then close every submitted speech (which cancels its job on its worker)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for speech in list(self._live):
            await speech.close(reason)  # cancels the job on its worker unless it already ended
        self._live.clear()
        self.pending = 0

    # ----- the two loops ---------------------------------------------------------------------------------------

    async def _submit_loop(self) -> None:
        service = SynthesisService.of(self.conn.request.app)
        while True:
            item = await self._segments.get()
            if item is None:
                await self._speeches.put(None)
                return
            if isinstance(item, Mark):
                await self._speeches.put(item)
                continue
            segment, voice_id = item
            self._queued_chars -= len(segment)
            await self._slots.acquire()
            request = SynthesisRequest(
                text=segment,
                voice_id=voice_id or self.params.voice_id,
                output_format=self.params.fmt.name,
                request_id=self.conn.socket_id,
                workspace=self._workspace,
                voice_settings=self.voice_settings,
                seed=self.params.seed,
                options=self.options,
                alignment=True,
                priority="realtime",
                # Its audio plays right after the previous segment's, still being made or sent.
                follows=self._last_job if self._last_job in self._live_ids() else "",
            )
            try:
                # Past the key's share of the queue, the service waits for one of its own jobs to end (bounded by
                # the first-chunk deadline), so other keys' jobs go first; an interrupt may cut that wait short.
                speech = await service.speak(request, owner=self._owner)
            except SynthesisFailed as err:
                # A voice or text options it refused, the queue (or this key's share) full for the whole wait, Redis.
                logger.info("socket %s: segment not queued: %s", self.conn.socket_id, err.failure.message)
                await self._fail(err.failure)
                return
            except Exception:  # a defect (in text preparation, say): its traceback goes to the log
                logger.exception("socket %s: could not build or queue a segment", self.conn.socket_id)
                await self._fail(unreachable())
                return
            self._live.add(speech)
            job = speech.job
            self._last_job = job.job_id
            if speech.spoken.changed:
                self._mappers[job.job_id] = AlignmentMapper(speech.spoken)
            if self._interrupted:
                return  # interrupt() cancels every live job once this task has ended
            logger.debug("socket %s: segment job %s (%d chars)", self.conn.socket_id, job.job_id, len(segment))
            await self._speeches.put(speech)

    def _live_ids(self) -> set[str]:
        """The job ids of the segments submitted and not yet fully sent."""
        return {speech.job.job_id for speech in self._live}

    async def _fail(self, failure: Failure) -> None:
        """End the socket with the failure's error frame (this task sends it and closes)."""
        self._finisher = asyncio.current_task()
        await self.conn.fail(WsError(failure.realtime_code, failure.message))

    async def _forward_loop(self) -> None:
        try:
            while True:
                speech = await self._speeches.get()
                if speech is None:
                    break
                if isinstance(speech, Mark):
                    if self.on_mark is not None:
                        await self.on_mark(speech)
                    continue
                try:
                    job_start = True
                    self._mapper = self._mappers.pop(speech.job.job_id, None)
                    async for event in speech.chunks():
                        job_start = await self._forward(event, job_start)
                        if self._interrupted:
                            return
                except SynthesisFailed as err:
                    failure = err.failure
                    logger.info(
                        "socket %s: job %s failed: %s (%s)",
                        self.conn.socket_id,
                        speech.job.job_id,
                        failure.kind,
                        failure.reason,
                    )
                    raise WsError(failure.realtime_code, failure.message) from err
                finally:
                    await speech.close()
                    self._live.discard(speech)
                    self._slots.release()
                    self.pending -= 1
                    self.touch()
                    self.conn.touch()
        except WsError as err:
            self._finisher = asyncio.current_task()
            await self.conn.fail(err)
            return
        except Exception:  # a bug must not leave the client waiting until its inactivity timeout
            logger.exception("socket %s: forwarding failed", self.conn.socket_id)
            self._finisher = asyncio.current_task()
            await self.conn.fail(WsError(ApiCode.INTERNAL_ERROR, "Something went wrong on our side."))
            return
        self._finisher = asyncio.current_task()
        await self.on_done(self)

    # ----- frames ----------------------------------------------------------------------------------------------

    def _alignment(self, event: Event, job_start: bool) -> CharAlignment | None:
        alignment = CharAlignment.from_meta(event.meta.get("alignment"))
        if alignment is not None and self._mapper is not None:
            alignment = self._mapped(alignment)
        if alignment is None or not alignment.chars:
            return None
        if job_start and self._chars_sent and not alignment.chars[0].isspace():
            # Segments are spoken without the white space that separated them; put one back (zero length), so
            # the characters of all frames spell the text in the order it came.
            alignment = CharAlignment([" ", *alignment.chars], [0, *alignment.start_ms], [0, *alignment.dur_ms])
        self._chars_sent = True
        return alignment

    def _mapped(self, alignment: CharAlignment) -> CharAlignment:
        """The chunk's alignment on the caller's characters (both alignment fields carry them on the sockets)."""
        assert self._mapper is not None
        base = self._audio_ms  # where this chunk starts on the context's clock: the mapper needs one clock
        starts = [base + s for s in alignment.start_ms]
        ends = [a + d for a, d in zip(starts, alignment.dur_ms, strict=True)]
        chars, first, last = self._mapper.feed(alignment.chars, starts, ends)
        rel = [max(0, round(s - base)) for s in first]
        return CharAlignment(chars, rel, [max(0, round(e - base) - r) for e, r in zip(last, rel, strict=True)])

    async def _forward(self, event: Event, job_start: bool) -> bool:
        """Send one chunk as one frame, or several when its audio would make a frame too large.

        Returns whether the job's first characters are still to come.
        """
        alignment = self._alignment(event, job_start)
        audio = event.audio
        span = event.meta.get("span_ms")
        chunk_ms = float(span) if isinstance(span, int | float) else (alignment.end_ms if alignment else 0.0)
        if not audio and alignment is None:
            self._audio_ms += chunk_ms
            return job_start
        start_ms = self._audio_ms
        self._sending = True
        try:
            for part, frame_alignment in _frames(audio, alignment):
                if self.params.sync_alignment and frame_alignment is not None:
                    frame_alignment = _shifted(frame_alignment, round(start_ms))
                await self.conn.send_json_text(self.frame(part, frame_alignment, self.context_id))
                if audio:
                    start_ms += chunk_ms * len(part) / len(audio)
        finally:
            self._sending = False
        self._audio_ms += chunk_ms
        self.conn.touch()
        self.touch()
        return job_start and alignment is None


def _frames(audio: bytes, alignment: CharAlignment | None) -> list[tuple[bytes, dict[str, Any] | None]]:
    """A chunk's audio and alignment as frames: one, or several when the audio would make a frame too large."""
    pieces = max(1, -(-len(audio) // MAX_FRAME_AUDIO_BYTES))
    if pieces == 1:  # the usual case, per chunk: the chunk's own alignment is the frame's
        return [(audio, alignment.websocket() if alignment is not None else None)]
    size = -(-len(audio) // pieces)
    timeline = Timeline()
    if alignment is not None:
        timeline.add(alignment)
    frames: list[tuple[bytes, dict[str, Any] | None]] = []
    for index in range(pieces):
        part = audio[index * size : (index + 1) * size]
        frame_alignment = None
        if alignment is not None:
            # Split the characters with the audio: a piece gets the characters that start in its share.
            span, _ = timeline.take(alignment.end_ms * len(part) / len(audio), final=index == pieces - 1)
            frame_alignment = span.websocket() if span is not None else None
        frames.append((part, frame_alignment))
    return frames


def _shifted(alignment: dict[str, Any], offset_ms: int) -> dict[str, Any]:
    """A frame's alignment with its start times moved onto the context's timeline."""
    if not offset_ms:
        return alignment
    return {**alignment, "charStartTimesMs": [start + offset_ms for start in alignment["charStartTimesMs"]]}


def audio_frame(audio: bytes, alignment: dict[str, Any] | None, context_id: str | None, *, multi: bool) -> str:
    """The JSON text of one audio frame: ``audio``, ``isFinal`` null, both alignments, and (multi) ``contextId``.

    Written by hand because it is the hot path: json.dumps would scan the whole base64 text for characters to
    escape, and base64 has none. The alignment is serialised once and used for both fields.
    """
    aligned = json.dumps(alignment, separators=(",", ":"), ensure_ascii=False)
    context = f',"contextId":{json.dumps(context_id, ensure_ascii=False)}' if multi else ""
    encoded = base64.b64encode(audio).decode("ascii")
    return f'{{"audio":"{encoded}","isFinal":null,"normalizedAlignment":{aligned},"alignment":{aligned}{context}}}'


async def cancel_all(speakers: list[Speaker]) -> None:
    """Cancel several speakers (the socket closed); never raises."""
    for speaker in list(speakers):  # a finishing context may take itself off the list meanwhile
        with contextlib.suppress(Exception):
            await speaker.cancel()
