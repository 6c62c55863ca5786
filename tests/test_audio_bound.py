"""One audio bound for every transport (issue 48, A2 and A3): 10,000 digits are refused at once, in each transport's
own envelope, whatever ``apply_text_normalization`` says, and a long text that fits still speaks.

Before, the estimate counted a text the stage did not normalize character by character: ``"9" * 10_000`` under
``auto`` or ``off`` counted as 500 s, under the 900 s bound, and was spoken digit by digit (Vapi: 9,000 digits, 200
with 836 s of audio, one worker held 44 s); the sockets and Wyoming's streams cut such a run into jobs of 1,000
characters or less, each under the bound whatever the normalization. Now the estimate counts words (a digit read one
by one is a word), in the text stage every job goes through, and a request a transport cuts into several jobs is
checked whole first.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import aiohttp
import numpy as np
import pytest
from wyoming.audio import AudioChunk, AudioStart
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from harness.audio import assert_speech, decode_audio
from harness.avatar import Control, Viewer, open_session
from harness.base import free_port, make_settings
from zsynth.avatar.app import create_avatar_app
from zsynth.core.text import bounds
from zsynth.core.text import prepare as text_stage
from zsynth.core.text.prepare import TextOptions
from zsynth.speech.app import create_app

pytestmark = pytest.mark.heavy

DIGITS = "9" * 10_000
MODES = ["auto", "on", "off"]
CODE = "audio_limit_exceeded"
# Long, and well inside the bound in every mode: about 9,000 characters of prose with dates, money and counts
# (about 13,000 characters once its numbers are words: some 520 s at the estimate's pace, 600-700 s spoken).
PARAGRAPH = (
    "On March 3rd, 2024, the company reported revenue of $12.5 million, up 15% from the 10.9 million it made a year "
    "before. Its 250 staff in 4 offices shipped 1,200 orders a day, and the board met on 12 occasions. "
)
LONG_TEXT = (PARAGRAPH * (9_000 // len(PARAGRAPH))).strip()
FIRST_AUDIO_S = 60.0  # generous for a busy 2-core box: the first audio of an accepted text, or a refusal


async def _refused_json(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    """The JSON body of a refusal (a 200 fails the test at once, without waiting for its audio)."""
    try:
        assert resp.status == 400, f"{resp.status}: the text was accepted"
        return dict(await resp.json())
    finally:
        resp.close()


async def _first_audio(resp: aiohttp.ClientResponse, need: int = 22050) -> bytes:
    """At least ``need`` bytes of an accepted stream's audio; the stream is closed after (its job cancelled)."""
    try:
        assert resp.status == 200, await resp.text()
        audio = b""
        async with asyncio.timeout(FIRST_AUDIO_S):
            async for chunk in resp.content.iter_any():
                audio += chunk
                if len(audio) >= need:
                    break
        return audio
    finally:
        resp.close()


def _assert_sound(audio: bytes, output_format: str) -> None:
    samples, rate = decode_audio(audio, output_format)
    assert len(samples) >= rate * 0.4 and float(np.sqrt(np.mean(samples**2))) > 0.01, "no speech in the first audio"


@pytest.fixture
async def front(aiohttp_client, settings):
    """The speech front on the shared workers (an open server)."""
    return await aiohttp_client(create_app(settings))


# ----- the estimate --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_the_estimate_counts_digits_read_one_by_one_as_words_in_every_mode(mode):
    limits = bounds.OutputLimits(60.0, 900.0)
    for engine in ("piper", "turbo"):
        found = await text_stage.admit(
            [DIGITS], TextOptions(mode), engine, None, workspace="default", limits=bounds.UNBOUNDED
        )
        # "nine " per digit at the brisk pace, however the engine is given them.
        assert found.audio_s >= 10_000 * 5 / bounds.CHARS_PER_SECOND - 1, (engine, found)
        with pytest.raises(ValueError, match="audio"):
            await text_stage.admit([DIGITS], TextOptions(mode), engine, None, workspace="default", limits=limits)
        fits = await text_stage.admit([LONG_TEXT], TextOptions(mode), engine, None, workspace="default", limits=limits)
        assert 300 < fits.audio_s < 700, (engine, fits)


@pytest.mark.parametrize("mode", ["on", "off"])
async def test_the_estimate_stays_under_the_audio_piper_makes(front, mode):
    """Brisk: a paragraph with numbers, at the fastest speed a caller can ask, makes more audio than the estimate
    counts (measured: 18.3 s at speed 1.2 unnormalized and 19.3 s normalized, for an estimate of 15.5 s)."""
    estimate = await text_stage.admit(
        [PARAGRAPH], TextOptions(mode), "piper", None, workspace="default", limits=bounds.UNBOUNDED
    )
    resp = await front.post(
        "/v1/text-to-speech/joe?output_format=pcm_22050",
        json={"text": PARAGRAPH, "apply_text_normalization": mode, "voice_settings": {"speed": 1.2}},
    )
    assert resp.status == 200, await resp.text()
    samples, rate = decode_audio(await resp.read(), "pcm_22050")
    assert_speech(samples, rate, PARAGRAPH)
    assert len(samples) / rate > estimate.audio_s * 1.05, (len(samples) / rate, estimate)


# ----- HTTP: TTS, OpenAI, Vapi, dialogue -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("route", ["stream", "convert", "with-timestamps"])
async def test_tts_refuses_ten_thousand_digits_in_every_mode(front, route, mode):
    path = {"stream": "/stream", "convert": "", "with-timestamps": "/with-timestamps"}[route]
    async with asyncio.timeout(FIRST_AUDIO_S):
        resp = await front.post(
            f"/v1/text-to-speech/joe{path}?output_format=pcm_22050",
            json={"text": DIGITS, "apply_text_normalization": mode},
        )
        detail = (await _refused_json(resp))["detail"]
    assert detail["code"] == CODE and detail["status"] == CODE and detail["param"] == "text", detail
    assert "900 s" in detail["message"]


@pytest.mark.parametrize("mode", MODES)
async def test_tts_speaks_a_long_text_that_fits_in_every_mode(front, mode):
    resp = await front.post(
        "/v1/text-to-speech/joe/stream?output_format=pcm_22050",
        json={"text": LONG_TEXT, "apply_text_normalization": mode},
    )
    _assert_sound(await _first_audio(resp), "pcm_22050")


async def test_openai_speech_refuses_ten_thousand_digits(front):
    async with asyncio.timeout(FIRST_AUDIO_S):
        resp = await front.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": DIGITS})
        error = (await _refused_json(resp))["error"]
    assert error["code"] == CODE, error


@pytest.mark.parametrize("digits", [9_000, 10_000])
async def test_vapi_refuses_the_digits_at_8_khz(front, digits):
    """The audit's request: 9,000 digits at 8 kHz got 200 and 13.4 MB of PCM."""
    body = {"message": {"type": "voice-request", "text": "9" * digits, "sampleRate": 8000}}
    async with asyncio.timeout(FIRST_AUDIO_S):
        detail = (await _refused_json(await front.post("/v1/vapi/tts", json=body)))["detail"]
    assert detail["code"] == CODE, detail


async def test_vapi_speaks_a_long_text_that_fits(front):
    body = {"message": {"type": "voice-request", "text": LONG_TEXT, "sampleRate": 8000}}
    _assert_sound(await _first_audio(await front.post("/v1/vapi/tts", json=body), 8000), "pcm_8000")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("split", [1, 10])
async def test_dialogue_refuses_ten_thousand_digits_in_every_mode(front, mode, split):
    """In one input, or in ten inputs of 1,000 (each its own job, each under the bound alone)."""
    size = len(DIGITS) // split
    inputs = [{"text": DIGITS[i * size : (i + 1) * size], "voice_id": "joe"} for i in range(split)]
    async with asyncio.timeout(FIRST_AUDIO_S):
        resp = await front.post(
            "/v1/text-to-dialogue/stream?output_format=pcm_22050",
            json={"inputs": inputs, "apply_text_normalization": mode},
        )
        detail = (await _refused_json(resp))["detail"]
    assert detail["code"] == CODE, detail


@pytest.mark.parametrize("mode", MODES)
async def test_dialogue_speaks_a_long_text_that_fits_in_every_mode(front, mode):
    half = len(LONG_TEXT) // 2
    inputs = [{"text": LONG_TEXT[:half], "voice_id": "joe"}, {"text": LONG_TEXT[half:], "voice_id": "joe"}]
    resp = await front.post(
        "/v1/text-to-dialogue/stream?output_format=pcm_22050",
        json={"inputs": inputs, "apply_text_normalization": mode},
    )
    _assert_sound(await _first_audio(resp), "pcm_22050")


# ----- the sockets ---------------------------------------------------------------------------------------------------


async def _first_frame(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    """The first error or audio frame the socket sends."""
    async with asyncio.timeout(FIRST_AUDIO_S):
        async for message in ws:
            assert message.type is aiohttp.WSMsgType.TEXT, message
            frame = dict(json.loads(message.data))
            if frame.get("error") or frame.get("audio"):
                return frame
    raise AssertionError(f"the socket closed ({ws.close_code}) with neither audio nor an error")


async def _closed(ws: aiohttp.ClientWebSocketResponse) -> int | None:
    async with asyncio.timeout(FIRST_AUDIO_S):
        async for message in ws:
            assert message.type is not aiohttp.WSMsgType.TEXT or not json.loads(message.data).get("audio")
    return ws.close_code


def _tts_socket(route: str, mode: str) -> str:
    return f"/v1/text-to-speech/joe/{route}?output_format=pcm_16000&apply_text_normalization={mode}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("auto_mode", [False, True])
@pytest.mark.parametrize("route", ["stream-input", "multi-stream-input"])
async def test_tts_sockets_refuse_ten_thousand_digits_in_one_message(front, route, auto_mode, mode):
    """The buffer cuts the run into segments of 1,000 (auto_mode: one segment); either way the message is refused
    before any audio, with the error frame and close 1008 the sockets' other bounds use."""
    async with front.ws_connect(_tts_socket(route, mode) + f"&auto_mode={str(auto_mode).lower()}") as ws:
        await ws.send_json({"text": " "})
        await ws.send_json({"text": DIGITS, "flush": True})
        frame = await _first_frame(ws)
        assert frame.get("error") == CODE, f"audio came first: {str(frame)[:200]}"
        assert "900 s" in frame["message"]
        assert await _closed(ws) == 1008


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("route", ["stream-input", "multi-stream-input"])
async def test_tts_sockets_speak_a_long_text_that_fits(front, route, mode):
    async with front.ws_connect(_tts_socket(route, mode)) as ws:
        await ws.send_json({"text": " "})
        await ws.send_json({"text": LONG_TEXT, "flush": True})
        frame = await _first_frame(ws)
        assert not frame.get("error"), frame
        _assert_sound(base64.b64decode(frame["audio"]), "pcm_16000")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("route", ["stream-input", "multi-stream-input"])
async def test_dialogue_sockets_refuse_ten_thousand_digits_in_one_message(front, route, mode):
    context = {"context_id": "c1"} if route == "multi-stream-input" else {}
    path = f"/v1/text-to-dialogue/{route}?output_format=pcm_16000&apply_text_normalization={mode}"
    async with front.ws_connect(path) as ws:
        await ws.send_json({**context, "voices": ["joe"]})
        inputs = [{"text": DIGITS[i * 1_000 : (i + 1) * 1_000], "voice_id": "joe"} for i in range(10)]
        await ws.send_json({**context, "inputs": inputs, "flush": True})
        frame = await _first_frame(ws)
        assert frame.get("error") == CODE, f"audio came first: {str(frame)[:200]}"
        assert await _closed(ws) == 1008


# ----- Wyoming -------------------------------------------------------------------------------------------------------


@pytest.fixture
async def wyoming_port(aiohttp_client, redis_url, data_dir, shared_workers) -> int:
    """A front on the shared workers with its Wyoming listener on a free loopback port."""
    port = free_port()
    await aiohttp_client(create_app(make_settings(redis_url, data_dir, wyoming_uri=("127.0.0.1", port))))
    return port


async def _events_until(client: AsyncTcpClient, *ends: str) -> list[Event]:
    """Events up to the first of ``ends``, an error, or the close (None ends the list)."""
    events: list[Event] = []
    async with asyncio.timeout(FIRST_AUDIO_S):
        while True:
            event = await client.read_event()
            if event is None:
                return events
            events.append(event)
            if event.type in ends or Error.is_type(event.type):
                return events


async def test_wyoming_refuses_ten_thousand_digits(wyoming_port):
    async with AsyncTcpClient("127.0.0.1", wyoming_port) as client:
        await client.write_event(Synthesize(DIGITS).event())
        events = await _events_until(client, "audio-start")
        assert events and Error.is_type(events[-1].type), [e.type for e in events]
        assert Error.from_event(events[-1]).code == CODE
        assert await client.read_event() is None  # a plain answer that failed ends the connection, as wyoming-piper


@pytest.mark.parametrize("chunks", [1, 10])
async def test_a_wyoming_stream_of_ten_thousand_digits_is_refused(wyoming_port, chunks):
    """In one synthesize-chunk, or in ten of 1,000: the stream's pieces are jobs of their own, each under the bound
    alone; the stream as a whole is one answer, held to the bound of one request."""
    size = len(DIGITS) // chunks
    async with AsyncTcpClient("127.0.0.1", wyoming_port) as client:
        await client.write_event(SynthesizeStart().event())
        for index in range(chunks):
            await client.write_event(SynthesizeChunk(DIGITS[index * size : (index + 1) * size]).event())
        await client.write_event(SynthesizeStop().event())
        events = await _events_until(client, "synthesize-stopped")
        errors = [Error.from_event(e) for e in events if Error.is_type(e.type)]
        assert errors and errors[0].code == CODE, [e.type for e in events]
        if chunks == 1:
            assert not [e for e in events if AudioChunk.is_type(e.type)], "audio before the refusal"
        events += await _events_until(client, "synthesize-stopped")
        assert events[-1].type == "synthesize-stopped"  # the stream still ends, and the connection goes on


async def test_wyoming_speaks_a_long_text_that_fits(wyoming_port):
    async with AsyncTcpClient("127.0.0.1", wyoming_port) as client:
        await client.write_event(Synthesize(LONG_TEXT).event())
        events = await _events_until(client, "audio-chunk")
        assert events[-1].type == "audio-chunk", [e.type for e in events]
        start = AudioStart.from_event(next(e for e in events if AudioStart.is_type(e.type)))
        chunk = AudioChunk.from_event(events[-1])
        samples = np.frombuffer(chunk.audio, dtype="<i2").astype(np.float32) / 32768.0
        assert start.rate == chunk.rate and len(samples) > 0


# ----- the avatar ----------------------------------------------------------------------------------------------------

AVATAR_KEY = "avatar-bound-key"


@pytest.mark.usefixtures("loopback_ice")
async def test_the_avatar_refuses_ten_thousand_digits_and_speaks_a_long_text(
    aiohttp_client, redis_url, data_dir, shared_workers
):
    settings = make_settings(redis_url, data_dir, auth_api_keys=(AVATAR_KEY,), avatar_connect_timeout_s=30.0)
    client = await aiohttp_client(create_avatar_app(settings))
    headers = {"X-Api-Key": AVATAR_KEY}
    viewer = Viewer()
    try:
        _, control = await open_session(client, viewer, headers)
        await control.ws.send_json({"type": "speak", "text": DIGITS, "id": "digits"})
        accepted = await control.next("speak.accepted")
        error = await _avatar_event(control, "error", "avatar.start_talking")
        assert (error["code"], error["id"], error["task_id"]) == (CODE, "digits", accepted["task_id"]), error
        await control.ws.send_json({"type": "speak", "text": LONG_TEXT, "id": "long"})
        await control.next("speak.accepted")
        started = await _avatar_event(control, "avatar.start_talking", "error")
        assert started["type"] == "avatar.start_talking", started
        await control.ws.close()
    finally:
        await viewer.close()


async def _avatar_event(control: Control, *kinds: str) -> dict[str, Any]:
    """The first event of one of ``kinds`` the control socket sends."""
    async with asyncio.timeout(FIRST_AUDIO_S):
        while True:
            message = await control.ws.receive()
            assert message.type is aiohttp.WSMsgType.TEXT, f"the control socket ended: {message}"
            event = dict(message.json())
            if event["type"] in kinds:
                return event
