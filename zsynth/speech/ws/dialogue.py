"""The text-to-dialogue sockets: ``/v1/text-to-dialogue/stream-input`` and ``/multi-stream-input``.

Built on the TTS sockets' machinery (:class:`~zsynth.speech.ws.connection.Connection` for auth, query, errors and
sends; one :class:`~zsynth.speech.ws.speaker.Speaker` per context for the jobs and the frames), with ElevenLabs'
dialogue message set:

* ``{"voices": [ids], "context_id"?, "voice_settings"?}`` registers a context's voices (1-10); it opens the context.
* ``{"inputs": [{"text", "voice_id", "new_turn"?}], "context_id"?}``: each input is spoken in its voice (one of the
  context's), in order, as soon as it arrives.
* ``{"flush": true}`` asks for one ``{"is_final_audio_for_turn": true}`` once the audio of everything sent before it
  has gone out; ``{"keep_alive": true}`` only resets the idle timer.
* ``{"close_context": true}`` ends a context: after a flush its audio finishes, otherwise it is a barge-in (its audio
  stops at once); then one ``{"is_final": true}``. ``{"close_socket": true}`` ends every context, then the socket
  (close 1000).

Audio frames are ``{"audio", "alignment": {"chars", "char_start_times_ms", "char_durations_ms"},
"normalized_alignment", "context_id"}`` with times from 0 in every frame. A message for a context that was never
registered, or was closed, gets an error frame (``context_not_found``) and the socket stays open. On
``stream-input`` there is one context and messages carry no ``context_id``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from zsynth.core.codes import ApiCode
from zsynth.speech.ws.connection import (
    CLOSE_POLICY,
    Connection,
    StreamParams,
    WsError,
    inactivity_error,
    parse_params,
    voice_settings_field,
)
from zsynth.speech.ws.lifecycle import run_socket
from zsynth.speech.ws.speaker import Mark, Speaker
from zsynth.speech.ws.stream_input import MIN_WAIT_S
from zsynth.speech.ws.text_options import socket_text_options

logger = logging.getLogger(__name__)

MAX_CONTEXTS: Final = 5
MAX_VOICES: Final = 10


def dialogue_frame(audio: bytes, alignment: dict[str, Any] | None, context_id: str | None) -> str:
    """One audio frame in the dialogue sockets' shape (snake_case alignment keys, ``context_id``)."""
    aligned = None
    if alignment is not None:
        aligned = {
            "chars": alignment["chars"],
            "char_start_times_ms": alignment["charStartTimesMs"],
            "char_durations_ms": alignment["charDurationsMs"],
        }
    body = {"audio": base64.b64encode(audio).decode("ascii"), "alignment": aligned, "normalized_alignment": aligned}
    if context_id is not None:
        body["context_id"] = context_id
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


@dataclass(slots=True)
class Context:
    """A registered context: its voices and its speaker."""

    voices: tuple[str, ...]
    speaker: Speaker
    flushing: bool = False


class DialogueSession:
    """The contexts of one dialogue socket."""

    def __init__(self, conn: Connection, params: StreamParams, speakers: list[Speaker], *, multi: bool) -> None:
        self.conn = conn
        self.params = params
        self.speakers = speakers
        self.multi = multi
        self.live: dict[str | None, Context] = {}
        self.closing: set[Speaker] = set()
        self.closing_socket = False

    def _reply(self, payload: dict[str, Any], context_id: str | None) -> dict[str, Any]:
        return {**payload, "context_id": context_id} if self.multi else payload

    async def _refuse(self, context_id: str | None, error: str, message: str) -> None:
        """An error frame that leaves the socket open (a message this context cannot take)."""
        logger.info("socket %s: context %r: %s", self.conn.socket_id, context_id, message)
        await self.conn.send(self._reply({"message": message, "error": error, "code": CLOSE_POLICY}, context_id))

    async def _register(self, context_id: str | None, message: dict[str, Any]) -> None:
        voices = message["voices"]
        if (
            not isinstance(voices, list)
            or not 1 <= len(voices) <= MAX_VOICES
            or not all(isinstance(v, str) and v.strip() and len(v) <= 128 for v in voices)
        ):
            raise WsError(ApiCode.INVALID_MESSAGE, f"'voices' must be a list of 1 to {MAX_VOICES} voice ids.")
        context = self.live.get(context_id)
        if context is not None:
            context.voices = tuple(voices)
            return
        if len(self.live) >= MAX_CONTEXTS:
            raise WsError(
                ApiCode.MAX_ACTIVE_CONVERSATIONS,
                f"Maximum simultaneous contexts per WebSocket connection exceeded ({MAX_CONTEXTS}).",
            )
        options = await socket_text_options(self.conn, self.params, message)

        async def marked(_: Mark) -> None:
            await self.conn.send(self._reply({"is_final_audio_for_turn": True}, context_id))

        speaker = Speaker(
            self.conn,
            self.params,
            voice_settings_field(message),
            context_id,
            multi=self.multi,
            on_done=self._finished,
            options=options,
            frame=dialogue_frame,
            on_mark=marked,
        )
        self.speakers.append(speaker)
        self.live[context_id] = Context(tuple(voices), speaker)

    async def _finished(self, speaker: Speaker) -> None:
        self.closing.discard(speaker)
        if speaker in self.speakers:
            self.speakers.remove(speaker)
        await self.conn.send(self._reply({"is_final": True}, speaker.context_id))
        if self.closing_socket and not self.closing:
            await self.conn.close(1000)

    async def _close_context(self, context_id: str | None) -> None:
        context = self.live.pop(context_id, None)
        if context is None:
            await self._refuse(context_id, ApiCode.CONTEXT_NOT_FOUND, f"Context {context_id!r} is not open.")
            return
        speaker = context.speaker
        if context.flushing or not speaker.busy:
            self.closing.add(speaker)
            speaker.end()
            return
        await speaker.interrupt()  # a barge-in: its audio stops now
        if speaker in self.speakers:
            self.speakers.remove(speaker)
        await self.conn.send(self._reply({"is_final": True}, context_id))

    async def handle(self, message: dict[str, Any]) -> None:
        """Apply one client message."""
        context_id = message.get("context_id") if self.multi else None
        if context_id is not None and not isinstance(context_id, str):
            raise WsError(ApiCode.INVALID_MESSAGE, "'context_id' must be a string.")
        if message.get("close_socket") is True:
            self.closing_socket = True
            for live in list(self.live):
                await self._close_context(live)
            if not self.closing:
                await self.conn.close(1000)
            return
        if self.multi and context_id is None:
            raise WsError(ApiCode.INVALID_MESSAGE, "Every message but close_socket needs a 'context_id'.")
        if "voices" in message:
            await self._register(context_id, message)
        context = self.live.get(context_id)
        if message.get("close_context") is True:
            await self._close_context(context_id)
            return
        if context is None:
            if any(key in message for key in ("inputs", "flush", "keep_alive")):
                await self._refuse(context_id, ApiCode.CONTEXT_NOT_FOUND, f"Context {context_id!r} is not open.")
            return
        context.speaker.touch()
        await self._inputs(context, message.get("inputs"))
        if message.get("flush") is True:
            context.flushing = True
            context.speaker.mark()

    async def _inputs(self, context: Context, inputs: object) -> None:
        if inputs is None:
            return
        if not isinstance(inputs, list):
            raise WsError(ApiCode.INVALID_MESSAGE, "'inputs' must be a list of {text, voice_id}.")
        checked: list[tuple[str, str]] = []
        for item in inputs:
            text = item.get("text") if isinstance(item, dict) else None
            voice = item.get("voice_id") if isinstance(item, dict) else None
            if not isinstance(text, str) or not isinstance(voice, str):
                raise WsError(ApiCode.INVALID_MESSAGE, "Every input needs a string 'text' and 'voice_id'.")
            checked.append((text, voice))
        # Each input is its own job; the message's inputs together are held to the bounds of one request.
        await context.speaker.admit([text for text, voice in checked if voice in context.voices])
        for text, voice in checked:
            if voice not in context.voices:
                await self._refuse(
                    context.speaker.context_id,
                    ApiCode.VOICE_NOT_REGISTERED,
                    f"Voice {voice!r} is not one of this context's.",
                )
                continue
            if text.strip():
                context.flushing = False
                context.speaker.speak(text.strip(), voice)

    @property
    def busy(self) -> bool:
        """Some context still has audio to send."""
        return any(s.busy for s in self.speakers)


def _serve_as(multi: bool) -> Any:
    async def serve(conn: Connection, speakers: list[Speaker]) -> None:
        # Times restart at 0 in every frame on these sockets, whatever sync_alignment says.
        params = dataclasses.replace(parse_params(conn.request), sync_alignment=False)
        first = await conn.start(params, bos=False)
        if first is None:
            return
        session = DialogueSession(conn, params, speakers, multi=multi)
        message: dict[str, Any] | None = first
        while True:
            if message is not None and not session.closing_socket:
                await session.handle(message)
            idle = time.monotonic() - conn.last_activity
            if not session.busy and not session.closing_socket and idle >= params.inactivity_s:
                raise inactivity_error(params)
            wait = params.inactivity_s - idle if not session.busy else 1.0
            try:
                message = await conn.receive(max(MIN_WAIT_S, wait))
            except TimeoutError:
                message = None
                continue
            if message is None:
                return

    return serve


async def dialogue_stream_input(request: web.Request) -> web.WebSocketResponse:
    """The single-context dialogue socket."""
    return await run_socket(request, "dialogue-stream-input", _serve_as(False))


async def dialogue_multi_stream_input(request: web.Request) -> web.WebSocketResponse:
    """The multi-context dialogue socket."""
    return await run_socket(request, "dialogue-multi-stream-input", _serve_as(True))
