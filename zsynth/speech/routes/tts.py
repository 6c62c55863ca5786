"""Text to speech over HTTP: ``POST /v1/text-to-speech/{voice_id}`` (whole body) and ``.../stream`` (chunked)."""

from __future__ import annotations

from aiohttp import web

from zsynth.kit.endpoints import Endpoints
from zsynth.speech.synthesis_http import (
    AudioStream,
    ConvertQuery,
    StreamQuery,
    TextToSpeechRequest,
    audio_headers,
    every_chunk,
    finish_stream,
    first_chunk,
    speak,
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
        chunks = speech.chunks()
        first = await first_chunk(chunks)
        response = AudioStream(request, audio_headers(request, tts, speech.job))
        await response.prepare(request)

        async def write_all() -> None:
            if first is not None:
                await response.write(first.audio)
                async for event in chunks:
                    await response.write(event.audio)

        return await finish_stream(request, response, speech, write_all())
