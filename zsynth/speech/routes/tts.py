"""Text to speech over HTTP: ``POST /v1/text-to-speech/{voice_id}`` (whole body) and ``.../stream`` (chunked)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from zsynth.core.protocol import Event
from zsynth.kit.endpoints import Endpoints
from zsynth.speech.synthesis_http import (
    ConvertQuery,
    StreamQuery,
    TextToSpeechRequest,
    audio_headers,
    every_chunk,
    speak,
    stream_speech,
    synthesis_doc,
    tts_request,
)

routes = Endpoints()


@routes.post(
    "/v1/text-to-speech/{voice_id}",
    **synthesis_doc("convert", "text_to_speech", "Synthesize; answer when complete."),
)
async def convert(request: web.Request, body: TextToSpeechRequest, query: ConvertQuery) -> web.Response:
    """Whole-body synthesis: the answer is sent once the audio is complete."""
    tts = tts_request(request, body, query)
    async with await speak(request, tts) as speech:
        audio = b"".join(event.audio for event in await every_chunk(speech))
        return web.Response(body=audio, headers=audio_headers(request, tts, speech.job))


@routes.post(
    "/v1/text-to-speech/{voice_id}/stream",
    **synthesis_doc("stream", "text_to_speech_stream", "Synthesize; stream each chunk as soon as it is ready."),
)
async def stream(request: web.Request, body: TextToSpeechRequest, query: StreamQuery) -> web.StreamResponse:
    """Chunked synthesis: each chunk is written as soon as the worker publishes it.

    Errors before the first byte are answered with the JSON envelope (503 for transient ones). After that the
    status is already sent, so a failure ends the response without the final chunk, which clients detect as an
    incomplete transfer.
    """
    tts = tts_request(request, body, query)
    async with await speak(request, tts) as speech:
        return await stream_speech(request, speech, audio_headers(request, tts, speech.job), _raw_audio)


async def _raw_audio(events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
    """Each chunk's audio as it is."""
    async for event in events:
        yield event.audio
