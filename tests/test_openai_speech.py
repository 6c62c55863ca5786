"""The official ``openai`` SDK, unpatched, against a real ``zsynth serve`` with the shared Piper workers and moto."""

from __future__ import annotations

import base64
import concurrent.futures
import io
import json
from pathlib import Path

import av
import httpx
import numpy as np
import openai
import pytest
import redis
import soundfile as sf

from harness.audio import assert_speech
from harness.base import wait_for
from harness.fronts import front_process
from harness.voice_clips import pitch_of, reference_file
from zsynth.core import protocol
from zsynth.core.config import Settings, SettingsError
from zsynth.speech.routes.openai_speech import engine_speed

KEY = "openai-route-static-key"
TEXT = "The quick brown fox jumps over the lazy dog, and then it takes a nap."


def decode(data: bytes, response_format: str) -> tuple[np.ndarray, int]:
    """Decode a response body the way a user's player would; pcm is raw 24 kHz s16le mono."""
    if response_format == "pcm":
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0, 24000
    if response_format == "aac":
        with av.open(io.BytesIO(data), "r") as container:
            stream = container.streams.audio[0]
            frames = [frame.to_ndarray().reshape(-1) for frame in container.decode(stream)]
            return np.concatenate(frames).astype(np.float32), stream.rate
    samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    return samples[:, 0], int(rate)


@pytest.fixture(scope="module")
def front(redis_url, data_dir, shared_workers, keys_table):
    """A keyed front with the keys table (for ephemeral tokens) and two OpenAI names mapped."""
    env = {"ZSYNTH_API_KEY": KEY, "ZSYNTH_API_KEYS_TABLE": keys_table, "ZSYNTH_OPENAI_VOICES": "alloy=joe"}
    with front_process(redis_url, data_dir, **env) as (_, base):
        yield base


@pytest.fixture(scope="module")
def sdk(front) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{front}/v1", api_key=KEY, max_retries=0)


@pytest.mark.heavy
@pytest.mark.parametrize("response_format", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_every_response_format_is_speech(sdk, response_format):
    answer = sdk.audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format=response_format
    )
    assert answer.headers["x-model-id"] == "tts-1"
    assert answer.headers["x-voice-id"] == "joe"
    expected_type = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac"}
    assert answer.headers["content-type"] == expected_type.get(response_format, f"audio/{response_format}")
    samples, rate = decode(answer.content, response_format)
    assert rate in (24000, 44100, 48000)
    if response_format in ("wav", "pcm", "aac", "flac"):
        assert rate == 24000
    assert_speech(samples, rate, TEXT)


@pytest.mark.heavy
def test_streaming_response_to_a_file(sdk, tmp_path: Path):
    target = tmp_path / "speech.mp3"
    with sdk.audio.speech.with_streaming_response.create(model="gpt-4o-mini-tts", voice="alloy", input=TEXT) as resp:
        resp.stream_to_file(target)
    samples, rate = sf.read(target, dtype="float32")
    assert_speech(samples, rate, TEXT)


@pytest.mark.heavy
def test_sse_deltas_then_done(sdk):
    body = sdk.audio.speech.create(
        model="gpt-4o-mini-tts", voice="alloy", input=TEXT, response_format="pcm", stream_format="sse"
    ).read()
    events = [json.loads(line[len(b"data: ") :]) for line in body.split(b"\n") if line.startswith(b"data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 1 and events[-1]["type"] == "speech.audio.done"
    assert events[-1]["usage"]["input_tokens"] == len(TEXT)
    pcm = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert_speech(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0, 24000, TEXT)


@pytest.mark.heavy
def test_unmapped_name_gets_the_swap_out_voice_and_speed_changes_the_length(sdk):
    lengths = {}
    for speed in (0.25, 1.0, 4.0):
        answer = sdk.audio.speech.with_raw_response.create(
            model="tts-1", voice="fable", input=TEXT, response_format="pcm", speed=speed, instructions="Speak slowly."
        )
        assert answer.headers["x-voice-id"] == "joe"  # the swap-out voice of the Piper engine
        lengths[speed] = len(answer.content)
        assert_speech(*decode(answer.content, "pcm"), TEXT)
    assert lengths[4.0] < lengths[1.0] * 0.97 < lengths[0.25] * 0.97 * 0.9


@pytest.mark.heavy
def test_cloned_voice_by_id(front, sdk):
    clip = reference_file("wav")
    resp = httpx.post(
        f"{front}/v1/voices/add",
        headers={"xi-api-key": KEY},
        data={"name": "openai-clone"},
        files={"files": ("ref.wav", clip, "audio/wav")},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    voice_id = resp.json()["voice_id"]
    cloned = sdk.audio.speech.with_raw_response.create(
        model="tts-1", voice={"id": voice_id}, input=TEXT, response_format="wav"
    )
    assert cloned.headers["x-voice-id"] == voice_id
    samples, rate = decode(cloned.content, "wav")
    assert_speech(samples, rate, TEXT)
    joe, joe_rate = decode(
        sdk.audio.speech.create(model="tts-1", voice="joe", input=TEXT, response_format="wav").read(), "wav"
    )
    # The reference clip is pitched well above the engine's own voice; the clone speaks higher too.
    assert pitch_of(samples, rate) > pitch_of(joe, joe_rate) * 1.1
    # The same id as a plain string works too.
    plain = sdk.audio.speech.with_raw_response.create(
        model="tts-1", voice=voice_id, input="Hello.", response_format="pcm"
    )
    assert plain.headers["x-voice-id"] == voice_id
    assert_speech(*decode(plain.content, "pcm"), "Hello.")


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("kwargs", "error", "param"),
    [
        ({"response_format": "ogg"}, openai.BadRequestError, "response_format"),
        ({"stream_format": "chunks"}, openai.BadRequestError, "stream_format"),
        ({"speed": 5.0}, openai.UnprocessableEntityError, "speed"),
        ({"input": ""}, openai.UnprocessableEntityError, "input"),
    ],
)
def test_bad_requests_raise_the_sdk_error_types(sdk, kwargs, error, param):
    args = {"model": "tts-1", "voice": "alloy", "input": TEXT, **kwargs}
    with pytest.raises(error) as info:
        sdk.audio.speech.create(**args)
    assert info.value.param == param
    assert info.value.type == "invalid_request_error"
    assert info.value.message


@pytest.mark.heavy
def test_wrong_key_is_authentication_error(front):
    bad = openai.OpenAI(base_url=f"{front}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)
    assert info.value.code == "invalid_api_key"
    assert info.value.type == "authentication_error"


@pytest.mark.heavy
def test_ephemeral_token_as_api_key(front):
    minted = httpx.post(f"{front}/v1/tokens/ephemeral", json={"ttl_seconds": 60}, headers={"xi-api-key": KEY})
    assert minted.status_code == 200, minted.text
    token = minted.json()["token"]
    client = openai.OpenAI(base_url=f"{front}/v1", api_key=token, max_retries=0)
    audio = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="wav").read()
    assert_speech(*decode(audio, "wav"), TEXT)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("speed", "engine"), [(0.25, 0.7), (0.5, 0.85), (1.0, 1.0), (2.0, 1.1), (4.0, 1.2), (1.5, 1.0585)]
)
def test_speed_mapping(speed, engine):
    assert engine_speed(speed) == pytest.approx(engine, abs=1e-3)


@pytest.mark.heavy
def test_full_queue_and_no_worker_raise_the_sdk_types(private_redis_url, data_dir):
    """No worker on this Redis database: the queued job times out (503), and a full queue refuses at once (429)."""
    env = {"ZSYNTH_MAX_QUEUE": "1", "ZSYNTH_FIRST_CHUNK_TIMEOUT": "4"}
    with front_process(private_redis_url, data_dir, **env) as (_, base):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="open", max_retries=0)
        queue = redis.Redis.from_url(private_redis_url)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(client.audio.speech.create, model="tts-1", voice="alloy", input=TEXT)
            wait_for(lambda: queue.llen(protocol.QUEUE) == 1, 10, "the first job in the queue")
            with pytest.raises(openai.RateLimitError) as busy:
                client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)
            assert busy.value.code == "system_busy" and busy.value.type == "rate_limit_error"
            assert busy.value.response.headers["retry-after"] == "1"
            with pytest.raises(openai.InternalServerError) as late:
                waiting.result(timeout=30)
            assert late.value.status_code == 503 and late.value.code == "system_busy"
        queue.close()


@pytest.mark.unit
def test_voice_map_setting_is_parsed_and_checked():
    parsed = Settings.from_env({"ZSYNTH_OPENAI_VOICES": " alloy=joe , nova=custom-abc "})
    assert parsed.voices.openai == (("alloy", "joe"), ("nova", "custom-abc"))
    for bad in ("alloy", "alloy=", "=joe"):
        with pytest.raises(SettingsError, match="ZSYNTH_OPENAI_VOICES"):
            Settings.from_env({"ZSYNTH_OPENAI_VOICES": bad})
