"""One live avatar session: its peer connection, tracks, speech tasks, control-socket events and teardown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

from aiohttp import web
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription

from zsynth.avatar.errors import AvatarError
from zsynth.avatar.media import AvatarVideoTrack, Playout, SpeechAudioTrack
from zsynth.avatar.renderers.base import AvatarRenderer
from zsynth.avatar.speech import AudioSlot, Framer, SpeechTask
from zsynth.core import workspaces
from zsynth.core.codes import ApiCode
from zsynth.core.config import Settings
from zsynth.core.ratelimit import TokenBucket
from zsynth.services.synthesis import Failure, SynthesisFailed, SynthesisService

logger = logging.getLogger(__name__)

_MAX_QUEUED_S: Final = 10.0  # speech buffered ahead of playback; the engine waits beyond this
_MAX_EVENTS: Final = 256  # unsent control events before a slow client is dropped


def ice_configuration(settings: Settings) -> RTCConfiguration:
    """No ICE servers unless configured: aiortc's default STUN server stalls gathering on offline hosts."""
    servers = [
        RTCIceServer(urls=url, username=settings.avatar.ice_username, credential=settings.avatar.ice_credential)
        if url.startswith("turn")
        else RTCIceServer(urls=url)
        for url in settings.avatar.ice_servers
    ]
    return RTCConfiguration(iceServers=servers)


class AvatarSession:
    """A peer connection streaming one avatar, steered by at most one control socket."""

    def __init__(
        self,
        session_id: str,
        settings: Settings,
        synthesis: SynthesisService,
        renderer: AvatarRenderer,
        voice_id: str,
        owner: str,
        on_closed: Callable[[AvatarSession], None],
        share_owner: str | None = None,
        workspace: str = workspaces.DEFAULT,
    ) -> None:
        self.session_id = session_id
        self.settings = settings
        # The server's one service: a clone this box lacks is fetched, an unknown id gets the swap-out voice, and the
        # speech counts against ``share_owner``'s share of the queue, as on every other transport.
        self.synthesis = synthesis
        self.share_owner = share_owner
        self.workspace = workspace  # whose clones it may speak: its credential's workspace
        self.renderer = renderer
        self.voice_id = voice_id
        self.owner = owner  # fingerprint of the credential that created it
        self.on_closed = on_closed
        self.created_at = time.time()
        self.state = "connecting"
        self.close_reason = ""
        self._closer: asyncio.Task[None] | None = None
        self.ws: web.WebSocketResponse | None = None
        self.talking: SpeechTask | None = None
        self.timeline = Playout()
        self.render_stream = renderer.open_stream(seed=hash(session_id) & 0xFFFF)
        self.audio = SpeechAudioTrack(self.timeline, self._on_play)
        self.video = AvatarVideoTrack(self.timeline, self.render_stream, lambda: self.talking is not None)
        self.pc = RTCPeerConnection(ice_configuration(settings))
        self._created = time.monotonic()
        self._last_activity = self._created
        self._seq = 0
        self._ready_sent = False
        self._events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._speak_queue: asyncio.Queue[SpeechTask] = asyncio.Queue()
        self._active: list[SpeechTask] = []  # accepted and not yet finished, in order
        self._speak_bucket = TokenBucket(settings.avatar.speak_rate, float(settings.avatar.speak_burst))
        self._feed_task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._writer: asyncio.Task[None] | None = None

    # -- signalling ---------------------------------------------------------------------------------------------

    async def answer(self, offer_sdp: str) -> str:
        """Apply the browser's offer, attach the tracks and return the answer SDP (with every ICE candidate)."""
        self.pc.on("connectionstatechange", self._on_connection_state)
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
            self.pc.addTrack(self.audio)
            self.pc.addTrack(self.video)
            await self.pc.setLocalDescription(await self.pc.createAnswer())
        # aiortc checks some SDP fields with assert (a payload type over 255, an m= line it cannot read): those are
        # the caller's bad offer too, not a server error.
        except (ValueError, TypeError, AttributeError, KeyError, IndexError, AssertionError) as err:
            logger.info("session %s: unusable offer: %r", self.session_id, err)
            raise AvatarError(400, ApiCode.INVALID_SDP, f"The SDP offer could not be used: {err}") from err
        self._tasks.append(asyncio.create_task(self._feeder(), name=f"avatar-feeder-{self.session_id}"))
        self._tasks.append(asyncio.create_task(self._watchdog(), name=f"avatar-watchdog-{self.session_id}"))
        return str(self.pc.localDescription.sdp)

    def _on_connection_state(self) -> None:
        state = self.pc.connectionState
        logger.info("session %s: peer connection %s", self.session_id, state)
        if state == "connected" and self.state == "connecting":
            self.state = "connected"
            self._maybe_ready()
        elif state in ("failed", "closed"):
            self.start_close(f"peer_{state}")

    def add_task(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` alongside the session; it is cancelled when the session closes."""
        self._tasks.append(asyncio.create_task(coro, name=name))

    # -- control socket -----------------------------------------------------------------------------------------

    def attach(self, ws: web.WebSocketResponse) -> None:
        """Bind the control socket: queued events flow to it from now on."""
        self.ws = ws
        self._writer = asyncio.create_task(self._write_events(ws), name=f"avatar-events-{self.session_id}")
        self.emit("session.state", state=self.state, session_id=self.session_id)
        self._maybe_ready()

    def _maybe_ready(self) -> None:
        if self.state == "connected" and self.ws is not None and not self._ready_sent:
            self._ready_sent = True
            info = self.renderer.info
            self.emit("session.ready", session_id=self.session_id, avatar_id=info.avatar_id, voice_id=self.voice_id)

    def emit(self, kind: str, **fields: Any) -> None:
        """Queue an event for the control socket; a client that stops reading is disconnected."""
        if self._events.qsize() >= _MAX_EVENTS:
            if not self.closing:
                logger.warning("session %s: control client is not reading; closing", self.session_id)
                self.start_close("slow_client")
            return
        self._events.put_nowait({"type": kind, "seq": self._seq, **fields})
        self._seq += 1

    async def _write_events(self, ws: web.WebSocketResponse) -> None:
        while (event := await self._events.get()) is not None:
            try:
                await ws.send_json(event)
            except (ConnectionError, RuntimeError):
                return

    def touch(self) -> None:
        """A command arrived: the session is not idle."""
        self._last_activity = time.monotonic()

    # -- speech -------------------------------------------------------------------------------------------------

    def _speak_refusal(self) -> tuple[str, str] | None:
        """Why a speak command cannot be accepted now: the queue is full, or the rate limit is spent."""
        settings = self.settings
        if len(self._active) >= settings.avatar.speak_queue:
            return "speak_queue_full", (
                f"{settings.avatar.speak_queue} speak commands already wait to be spoken; wait for some to finish "
                "or send interrupt."
            )
        if not self._speak_bucket.take():
            return "rate_limited", (
                f"Too many speak commands: at most {settings.avatar.speak_rate:g} a second "
                f"(bursts of {settings.avatar.speak_burst}). Send fewer, longer texts."
            )
        return None

    def speak(self, text: str, client_id: str | None, voice_id: str | None) -> SpeechTask | None:
        """Queue text to be spoken after anything already queued; None (an ``error`` event with the command's id
        was sent) when the speak queue is full or the session's rate limit is spent."""
        refusal = self._speak_refusal()
        if refusal is not None:
            self.emit("error", code=refusal[0], message=refusal[1], id=client_id)
            return None
        task = SpeechTask(text=text, voice_id=voice_id or self.voice_id, client_id=client_id)
        self._active.append(task)
        self._speak_queue.put_nowait(task)
        self.emit("speak.accepted", task_id=task.task_id, id=client_id)
        logger.info("session %s: task %s accepted (%d chars)", self.session_id, task.task_id, len(text))
        return task

    def interrupt(self) -> int:
        """Silence the avatar now: cancel the speaking and queued tasks and drop buffered audio."""
        count = 0
        for task in list(self._active):
            self._finish(task, interrupted=True)
            count += 1
        while not self._speak_queue.empty():
            self._speak_queue.get_nowait()
        self.timeline.clear()
        if self._feed_task is not None:
            self._feed_task.cancel()
        return count

    def _on_play(self, slot: AudioSlot | None) -> None:
        """Called by the audio track for every frame it sends: speech start and end are reported from here."""
        task = slot.task if slot is not None else None
        if task is None or task.finished:
            return
        if not task.started:
            task.started = True
            self.talking = task
            self.emit("avatar.start_talking", task_id=task.task_id, id=task.client_id)
        task.frames_played += 1
        self._last_activity = time.monotonic()
        if task.fully_played:
            self._finish(task, interrupted=False)

    def _finish(self, task: SpeechTask, interrupted: bool) -> None:
        if task.finished:
            return
        task.finished = True
        with contextlib.suppress(ValueError):
            self._active.remove(task)
        if self.talking is task:
            self.talking = None
        if task.started:
            self.emit(
                "avatar.stop_talking",
                task_id=task.task_id,
                id=task.client_id,
                duration_ms=task.duration_ms,
                interrupted=interrupted,
            )
        elif interrupted:
            self.emit("speak.cancelled", task_id=task.task_id, id=task.client_id)
        elif not task.failed:  # a job that produced no audio still starts and ends
            self.emit("avatar.start_talking", task_id=task.task_id, id=task.client_id)
            self.emit("avatar.stop_talking", task_id=task.task_id, id=task.client_id, duration_ms=0, interrupted=False)
        logger.info(
            "session %s: task %s %s after %d ms",
            self.session_id,
            task.task_id,
            "interrupted" if interrupted else "done",
            task.duration_ms,
        )

    async def _feeder(self) -> None:
        """Run speech tasks one at a time; the next starts synthesising while the previous is still playing."""
        while True:
            task = await self._speak_queue.get()
            if task.finished:
                continue
            feed = asyncio.create_task(self._feed(task), name=f"avatar-feed-{task.task_id}")
            self._feed_task = feed
            try:
                await asyncio.wait([feed])  # unlike awaiting it, an interrupt cancelling it does not stop the loop
            finally:
                if not feed.done():
                    feed.cancel()
                    await asyncio.wait([feed])
                self._feed_task = None
            if not feed.cancelled() and feed.exception() is not None:
                logger.error("session %s: task %s broke", self.session_id, task.task_id, exc_info=feed.exception())
                self.emit("error", code=ApiCode.INTERNAL_ERROR, message="Speaking failed.", task_id=task.task_id)

    async def _feed(self, task: SpeechTask) -> None:
        framer = Framer(task)
        job_id = "-"
        try:
            request = task.synthesis_request(self.session_id, self.workspace)
            async with await self.synthesis.speak(request, owner=self.share_owner) as speech:
                job_id = speech.job.job_id
                logger.info("session %s: task %s is job %s", self.session_id, task.task_id, job_id)
                async for event in speech.chunks():
                    await self._enqueue(framer.push(event))
                await self._enqueue(framer.flush())
        except SynthesisFailed as err:
            failure = err.failure
            logger.warning(
                "session %s: task %s (job %s) failed: %s (%s: %s)",
                self.session_id,
                task.task_id,
                job_id,
                failure.kind,
                failure.reason,
                failure.message,
            )
            self._speech_failed(task, failure)
        finally:
            task.feeding_done = True
            if task.fully_played:
                self._finish(task, interrupted=False)

    def _speech_failed(self, task: SpeechTask, failure: Failure) -> None:
        """Report a task whose speech failed: an ``error`` event with the failure's realtime code."""
        task.failed = True
        self.emit("error", code=failure.realtime_code, message=failure.message, task_id=task.task_id, id=task.client_id)

    async def _enqueue(self, slots: list[AudioSlot]) -> None:
        # Back-pressure: keep at most a few seconds of speech in memory ahead of the clock.
        while self.timeline.queued_s > _MAX_QUEUED_S:
            await asyncio.sleep(0.1)
        self.timeline.pending.extend(slots)

    # -- lifetime -----------------------------------------------------------------------------------------------

    @property
    def idle_s(self) -> float:
        """Seconds since the last command or played speech."""
        return time.monotonic() - self._last_activity

    async def _watchdog(self) -> None:
        tick = min(1.0, self.settings.avatar.idle_timeout_s / 4, self.settings.avatar.connect_timeout_s / 4)
        while True:
            await asyncio.sleep(tick)
            if self.state == "connecting" and time.monotonic() - self._created > self.settings.avatar.connect_timeout_s:
                await self.close("connect_timeout")
                return
            if self._active or self.talking is not None:
                self.touch()
            elif self.idle_s > self.settings.avatar.idle_timeout_s:
                await self.close("idle_timeout")
                return

    @property
    def closing(self) -> bool:
        """Teardown has begun (or is over)."""
        return self._closer is not None

    def start_close(self, reason: str) -> asyncio.Task[None]:
        """Begin teardown in its own task, so a cancelled caller (a dropped request) cannot cut it short."""
        if self._closer is None:
            self._closer = asyncio.create_task(self._close(reason), name=f"avatar-close-{self.session_id}")
        return self._closer

    async def close(self, reason: str) -> None:
        """End the session and wait until it is torn down."""
        await asyncio.shield(self.start_close(reason))

    async def _close(self, reason: str) -> None:
        """Stop speech, tasks, tracks and the peer connection, then the control socket."""
        self.close_reason = reason
        logger.info("session %s: closing (%s)", self.session_id, reason)
        self.interrupt()
        self.emit("session.state", state="closed", reason=reason, session_id=self.session_id)
        current = asyncio.current_task()
        others = [t for t in self._tasks if t is not current and not t.done()]
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        try:
            # pc.close() stops only tracks whose sender started; a never-connected pc would leave them live.
            self.audio.stop()
            self.video.stop()
            await self.pc.close()
            await self.render_stream.aclose()
            await self._close_socket(reason)
        finally:
            # Whatever failed above, the session leaves the registry: it must not hold a capacity slot for good.
            self.on_closed(self)

    async def _close_socket(self, reason: str) -> None:
        self._events.put_nowait(None)
        if self._writer is not None:
            try:
                await asyncio.wait_for(self._writer, 2.0)
            except TimeoutError:
                pass  # the writer was cancelled by the timeout; the socket closes regardless
        if self.ws is not None and not self.ws.closed:
            await self.ws.close(code=1000, message=reason.encode()[:120])

    def describe(self) -> dict[str, Any]:
        """The session as listed by the management routes."""
        return {
            "session_id": self.session_id,
            "avatar_id": self.renderer.info.avatar_id,
            "voice_id": self.voice_id,
            "state": "closing" if self.closing else self.state,
            "created_at": int(self.created_at),
            "control_attached": self.ws is not None and not self.ws.closed,
            "talking_task_id": self.talking.task_id if self.talking else None,
            "queued_tasks": len(self._active),
            "idle_s": round(self.idle_s, 1),
            "audio_frames_sent": self.audio.frames_sent,
            "video_frames_sent": self.video.frames_sent,
        }
