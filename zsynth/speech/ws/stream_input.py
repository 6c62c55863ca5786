"""``/v1/text-to-speech/{voice_id}/stream-input``: the ElevenLabs single-context realtime socket.

The client sends a first message (``{"text": " ", ...}``), then text; ``{"text": ""}`` ends the input. Buffered
text is spoken as the schedule, ``try_trigger_generation`` or ``flush`` release it; after the end of input every
buffered word is spoken, ``{"isFinal": true}`` is sent and the server closes with 1000.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from zsynth.core.config import Settings
from zsynth.services.keys import SETTINGS
from zsynth.speech.ws.buffer import TextBuffer
from zsynth.speech.ws.connection import Connection, StreamParams, inactivity_error, parse_params, voice_settings_field
from zsynth.speech.ws.lifecycle import run_socket
from zsynth.speech.ws.messages import ContextOpening, TextMessage, read
from zsynth.speech.ws.speaker import Speaker
from zsynth.speech.ws.text_options import socket_text_options

# Smallest wait between inactivity checks; aiohttp treats a 0 timeout as "no timeout".
MIN_WAIT_S = 0.05
# While audio is being made, how often the timer is looked at again (the timer restarts when the audio ends).
BUSY_POLL_S = 1.0


def make_buffer(message: dict[str, Any], params: StreamParams, settings: Settings) -> TextBuffer:
    """A text buffer with the message's ``generation_config.chunk_length_schedule`` (or the default)."""
    opening = read(ContextOpening, message)
    return TextBuffer(
        opening.generation_config.chunk_length_schedule,
        auto_mode=params.auto_mode,
        max_word_chars=settings.ws.max_word_chars,
        max_segment_chars=settings.limits.max_text_chars,
    )


async def _serve(conn: Connection, speakers: list[Speaker]) -> None:
    params = parse_params(conn.request)
    first = await conn.start(params, bos=True)
    if first is None:
        return
    buffer = make_buffer(first, params, conn.request.app[SETTINGS])

    async def finished(_: Speaker) -> None:
        await conn.send({"isFinal": True})
        await conn.close(1000)

    options = await socket_text_options(conn, params, first)
    speaker = Speaker(conn, params, voice_settings_field(first), None, multi=False, on_done=finished, options=options)
    speakers.append(speaker)
    message: dict[str, Any] | None = first
    while True:
        if message is not None and not speaker.ended:
            parsed = read(TextMessage, message, conn.request.app[SETTINGS].limits.max_text_chars)
            if parsed.text == "" and message is not first:
                for segment in buffer.drain():
                    speaker.speak(segment)
                speaker.end()
            else:
                await speaker.admit([parsed.text])
                for segment in buffer.add(parsed.text, try_trigger=parsed.try_trigger_generation, flush=parsed.flush):
                    speaker.speak(segment)
        # While audio is still to come (or after the end of input) the client owes us nothing.
        idle = time.monotonic() - conn.last_activity
        waiting = speaker.busy or speaker.ended
        if not waiting and idle >= params.inactivity_s:
            raise inactivity_error(params)
        timeout = min(params.inactivity_s, BUSY_POLL_S) if waiting else max(MIN_WAIT_S, params.inactivity_s - idle)
        try:
            message = await conn.receive(timeout)
        except TimeoutError:
            message = None
            continue
        if message is None:
            return


async def stream_input(request: web.Request) -> web.WebSocketResponse:
    """The stream-input socket."""
    return await run_socket(request, "stream-input", _serve)
