"""Speech with character timing over HTTP: with-timestamps (one JSON) and stream/with-timestamps (JSON lines)."""

from __future__ import annotations

import base64
import json

import pytest

from harness.audio import assert_speech, decode_audio
from harness.ws import squash
from zsynth.kit.answer_headers import AUDIO_HEADER_NAMES
from zsynth.speech.access import CORS_EXPOSE_HEADERS
from zsynth.speech.schemas.apidoc import AUDIO_HEADERS

from .openapi_helpers import DOC

TEXT = "The quick brown fox jumps over the lazy dog. Then it runs back home,   before the rain starts!"


def _check_alignment(alignment: dict, text: str, duration_s: float) -> None:
    chars = alignment["characters"]
    starts, ends = alignment["character_start_times_seconds"], alignment["character_end_times_seconds"]
    assert "".join(chars) == squash(text)
    assert len(chars) == len(starts) == len(ends)
    assert starts[0] == 0.0
    for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
        assert start <= end
        if i:
            assert start >= starts[i - 1]
    # The characters cover the audio (an encoder's last few ms may trail the last character).
    assert abs(ends[-1] - duration_s) < 0.1, (ends[-1], duration_s)


@pytest.mark.stack
@pytest.mark.parametrize("output_format", ["pcm_16000", "mp3_44100_128", "ulaw_8000"])
async def test_with_timestamps(client, output_format):
    resp = await client.post(
        f"/v1/text-to-speech/any-voice/with-timestamps?output_format={output_format}", json={"text": TEXT}
    )
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.headers["history-item-id"]
    body = await resp.json()
    samples, rate = decode_audio(base64.b64decode(body["audio_base64"]), output_format)
    duration = assert_speech(samples, rate, TEXT)
    _check_alignment(body["alignment"], TEXT, duration)
    assert body["normalized_alignment"] == body["alignment"]


@pytest.mark.stack
async def test_stream_with_timestamps_lines(client):
    resp = await client.post(
        "/v1/text-to-speech/any-voice/stream/with-timestamps?output_format=pcm_22050", json={"text": TEXT}
    )
    assert resp.status == 200
    lines = [json.loads(line) for line in (await resp.text()).splitlines() if line.strip()]
    assert len(lines) >= 2, "one line per chunk, sent as produced"
    audio = b"".join(base64.b64decode(line["audio_base64"]) for line in lines)
    samples, rate = decode_audio(audio, "pcm_22050")
    duration = assert_speech(samples, rate, TEXT)
    merged: dict[str, list] = {
        "characters": [],
        "character_start_times_seconds": [],
        "character_end_times_seconds": [],
    }
    for line in lines:
        if line["alignment"]:
            for key in merged:
                merged[key].extend(line["alignment"][key])
    # Times are absolute (from the start of the whole audio) on every line.
    _check_alignment(merged, TEXT, duration)


@pytest.mark.unit
def test_the_audio_headers_are_named_once() -> None:
    """The OpenAPI document describes, and CORS exposes, the headers the routes write."""
    assert tuple(AUDIO_HEADERS) == AUDIO_HEADER_NAMES
    assert set(AUDIO_HEADER_NAMES) <= set(CORS_EXPOSE_HEADERS)


@pytest.mark.stack
@pytest.mark.parametrize("route", ["with-timestamps", "stream/with-timestamps"])
async def test_with_timestamps_answers_carry_every_documented_audio_header(client, route):
    """Like every TTS answer, with x-model-id when the request named a model (the OpenAPI document used to leave it
    out of these two routes)."""
    resp = await client.post(
        f"/v1/text-to-speech/any-voice/{route}?output_format=pcm_16000",
        json={"text": "Hello there.", "model_id": "eleven_x"},
    )
    assert resp.status == 200, await resp.text()
    await resp.read()
    documented = DOC["paths"][f"/v1/text-to-speech/{{voice_id}}/{route}"]["post"]["responses"]["200"]["headers"]
    assert tuple(documented) == AUDIO_HEADER_NAMES
    assert all(resp.headers[name] for name in documented)
    assert resp.headers["x-model-id"] == "eleven_x"


@pytest.mark.stack
async def test_with_timestamps_errors_use_the_envelope(client):
    resp = await client.post("/v1/text-to-speech/v/stream/with-timestamps?output_format=wav_22050", json={"text": "x"})
    assert resp.status == 400
    assert (await resp.json())["detail"]["code"] == "invalid_output_format"
    resp = await client.post("/v1/text-to-speech/v/with-timestamps", json={"text": ""})
    assert resp.status == 422
