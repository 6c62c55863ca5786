"""``/v1/text-to-speech/{voice_id}/multi-stream-input``: several independent contexts over one socket.

Every client message may name a ``context_id`` (none means the default context, answered with ``contextId``
null). Text to an unknown context creates it; at most :data:`MAX_CONTEXTS` contexts may be live, a sixth ends the
socket with ``max_active_conversations``. A closed context still counts until its last audio is sent: a new context
past the limit waits for that (the socket's messages wait with it) for at most :data:`CLOSING_WAIT_S`, then ends the
socket the same way, so a client that loops open, flush, close never has more than five contexts in flight. A
``context_id`` holds at most 128 characters (:mod:`~zsynth.speech.ws.messages`). A closed context's id may be used
again: it opens a new context. ``flush`` speaks a context's buffer and sends no ``isFinal``. ``{"text": ""}`` only
keeps a context (or, with no ``context_id``, the socket) alive.

``close_context`` ends a context in one of two ways (the AsyncAPI: "if it has already been set to flush it will
continue flushing"):

* The context is *flushing*: its last message was a flush and no text came after it. Its audio is finished,
  then one ``{"isFinal": true, "contextId": ...}`` is sent. This is how an agent ends a turn (LiveKit sends
  ``{"text": "", "flush": true}`` and then ``close_context``). In ``auto_mode`` every message is spoken as it
  arrives, so ``flush`` on a message with text changes nothing; there only a flush without text sets a context
  flushing.
* Otherwise it is a barge-in (the agent's user spoke over it while text was still coming): buffered text is
  dropped, queued and running segments are cancelled (the worker stops within one piece), no more audio is sent
  for it, and its ``isFinal`` follows at once.

``close_socket`` ends every context that way (flushing ones finish) and then closes the socket with 1000. A context
idle for ``inactivity_timeout`` is closed quietly (no isFinal); a socket with no live context idle that long ends
with ``input_timeout_exceeded``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from zsynth.core.codes import ApiCode
from zsynth.core.text.prepare import TextOptions
from zsynth.services.keys import SETTINGS
from zsynth.speech.ws.buffer import TextBuffer
from zsynth.speech.ws.connection import (
    Connection,
    StreamParams,
    WsError,
    inactivity_error,
    parse_params,
    voice_settings_field,
)
from zsynth.speech.ws.lifecycle import run_socket
from zsynth.speech.ws.messages import ContextMessage, read
from zsynth.speech.ws.speaker import Speaker
from zsynth.speech.ws.stream_input import BUSY_POLL_S, MIN_WAIT_S, make_buffer
from zsynth.speech.ws.text_options import socket_text_options

logger = logging.getLogger(__name__)

MAX_CONTEXTS: Final = 5
# Seconds a new context waits for a closed one to send its last audio before the socket ends (as SEND_TIMEOUT_S).
CLOSING_WAIT_S: Final = 10.0


@dataclass(slots=True)
class Context:
    """One live context: its text buffer, its speaker, and whether it was set to flush (see the module doc)."""

    buffer: TextBuffer
    speaker: Speaker
    flushing: bool = False


class MultiSession:
    """The contexts of one multi-stream-input socket."""

    def __init__(self, conn: Connection, params: StreamParams, speakers: list[Speaker], first: dict[str, Any]) -> None:
        self.conn = conn
        self.params = params
        self.speakers = speakers  # the speakers not yet finished, cancelled when the socket ends
        self.live: dict[str | None, Context] = {}
        self.closing: set[Speaker] = set()  # contexts told to close whose isFinal is not sent yet
        self._finished_one = asyncio.Event()  # set when a closing context sends its isFinal
        self.closing_socket = False
        self.first = first  # the socket's first message: its dictionaries serve every context
        self._first_options: TextOptions | None = None  # its options, checked once for all the contexts

    async def _context(self, context_id: str | None, message: dict[str, Any]) -> Context:
        """The live context ``context_id``, created (counted against the limit) when there is none."""
        context = self.live.get(context_id)
        if context is not None:
            return context
        await self._room()
        buffer = make_buffer(message, self.params, self.conn.request.app[SETTINGS])
        own = "pronunciation_dictionary_locators" in message
        if own:
            options = await socket_text_options(self.conn, self.params, message)
            if message is self.first:  # the first context's own options are the socket's: read them once
                self._first_options = options
        else:
            if self._first_options is None:
                self._first_options = await socket_text_options(self.conn, self.params, self.first)
            options = self._first_options
        speaker = Speaker(
            self.conn,
            self.params,
            voice_settings_field(message),
            context_id,
            multi=True,
            on_done=self._finished,
            options=options,
        )
        self.speakers.append(speaker)
        context = Context(buffer, speaker)
        self.live[context_id] = context
        return context

    async def _room(self) -> None:
        """Return once a new context fits: fewer than MAX_CONTEXTS live or closing; WsError when it does not in time."""
        refusal = WsError(
            ApiCode.MAX_ACTIVE_CONVERSATIONS,
            f"Maximum simultaneous contexts per WebSocket connection exceeded ({MAX_CONTEXTS}). Please close an "
            "existing context before opening a new one (a closed context counts until its last audio is sent).",
        )
        if len(self.live) >= MAX_CONTEXTS:
            raise refusal
        if len(self.live) + len(self.closing) < MAX_CONTEXTS:
            return
        logger.info("socket %s: a new context waits for a closed one to finish its audio", self.conn.socket_id)
        try:
            async with asyncio.timeout(CLOSING_WAIT_S):
                while len(self.live) + len(self.closing) >= MAX_CONTEXTS:
                    self._finished_one.clear()
                    await self._finished_one.wait()
        except TimeoutError:
            raise refusal from None

    async def _finished(self, speaker: Speaker) -> None:
        """A closed context spoke its last audio: send its one isFinal; close the socket after the last one."""
        self.closing.discard(speaker)
        self._finished_one.set()
        # A voice agent keeps one socket for a whole conversation, a context per turn: forget finished speakers.
        self.speakers.remove(speaker)
        await self.conn.send({"isFinal": True, "is_final": True, "contextId": speaker.context_id})
        if self.closing_socket and not self.closing:
            await self.conn.close(1000)

    async def _close_context(self, context_id: str | None) -> None:
        context = self.live.pop(context_id, None)
        if context is None:
            return
        context.buffer.clear()
        speaker = context.speaker
        if context.flushing or not speaker.busy:
            self.closing.add(speaker)
            speaker.end()
            return
        logger.info("socket %s: context %r closed mid-speech: stopping it", self.conn.socket_id, context_id)
        await speaker.interrupt()
        if speaker in self.speakers:
            self.speakers.remove(speaker)
        await self.conn.send({"isFinal": True, "is_final": True, "contextId": context_id})

    async def handle(self, message: dict[str, Any]) -> None:
        """Apply one client message."""
        parsed = read(ContextMessage, message, self.conn.request.app[SETTINGS].limits.max_text_chars)
        if parsed.close_socket:
            self.closing_socket = True
            for context_id in list(self.live):
                await self._close_context(context_id)
            if not self.closing:
                await self.conn.close(1000)
            return
        context_id = parsed.context_id
        if parsed.close_context:
            await self._close_context(context_id)
            return
        text, flush = parsed.text, parsed.flush
        if text == "" and not flush and context_id not in self.live:
            return  # a keep-alive for the socket or for a context that is gone: nothing to keep
        context = await self._context(context_id, message)
        context.speaker.touch()
        spoken = bool(text.strip())
        if flush and (not spoken or not self.params.auto_mode):
            context.flushing = True
        elif spoken:
            context.flushing = False
        await context.speaker.admit([text])
        for segment in context.buffer.add(text, try_trigger=parsed.try_trigger_generation, flush=flush):
            context.speaker.speak(segment)

    async def expire_idle(self) -> float:
        """Close contexts idle past the timeout; return the seconds until the next one could expire."""
        now = time.monotonic()
        wait = self.params.inactivity_s
        for context_id, context in list(self.live.items()):
            speaker = context.speaker
            if speaker.busy:
                wait = min(wait, BUSY_POLL_S)
                continue
            left = self.params.inactivity_s - (now - speaker.last_activity)
            if left <= 0:
                self.live.pop(context_id)
                await speaker.cancel()  # nothing is in flight: this quietly retires it
                self.speakers.remove(speaker)
            else:
                wait = min(wait, left)
        return wait

    @property
    def busy(self) -> bool:
        """Some context still has audio to send."""
        return any(s.busy for s in self.speakers)


async def _serve(conn: Connection, speakers: list[Speaker]) -> None:
    params = parse_params(conn.request)
    first = await conn.start(params, bos=False)
    if first is None:
        return
    session = MultiSession(conn, params, speakers, first)
    message: dict[str, Any] | None = first
    while True:
        if message is not None and not session.closing_socket:
            await session.handle(message)
        wait = await session.expire_idle()
        idle = time.monotonic() - conn.last_activity
        if not session.live and not session.busy and not session.closing_socket:
            if idle >= params.inactivity_s:
                raise inactivity_error(params)
            wait = min(wait, params.inactivity_s - idle)
        try:
            message = await conn.receive(max(MIN_WAIT_S, wait))
        except TimeoutError:
            message = None
            continue
        if message is None:
            return


async def multi_stream_input(request: web.Request) -> web.WebSocketResponse:
    """The multi-stream-input socket."""
    return await run_socket(request, "multi-stream-input", _serve)
