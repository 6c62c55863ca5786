"""Speech over HTTP, end to end: front → Redis → real Piper worker → decoded audio."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from harness.audio import assert_speech, decode_audio
from harness.measure import sample_sum, scrape

pytestmark = pytest.mark.stack

TEXT = "The quick brown fox jumps over the lazy dog. Then it runs back home before the rain starts."


@pytest.mark.parametrize(
    "output_format",
    ["mp3_44100_128", "mp3_22050_32", "pcm_16000", "pcm_24000", "ulaw_8000", "alaw_8000", "wav_22050", "opus_48000_64"],
)
async def test_convert_formats_decode_to_speech(client, output_format):
    resp = await client.post(f"/v1/text-to-speech/any-voice?output_format={output_format}", json={"text": TEXT})
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"].startswith("audio/")
    assert resp.headers["character-cost"] == str(len(TEXT))
    assert resp.headers["request-id"] and resp.headers["history-item-id"]
    samples, rate = decode_audio(await resp.read(), output_format)
    assert rate == int(output_format.split("_")[1])
    assert_speech(samples, rate, TEXT)


async def test_default_format_is_mp3_and_model_id_is_echoed(client):
    resp = await client.post("/v1/text-to-speech/v", json={"text": "Hello there, friend.", "model_id": "eleven_x"})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "audio/mpeg"
    assert resp.headers["x-model-id"] == "eleven_x"
    samples, rate = decode_audio(await resp.read(), "mp3_44100_128")
    assert rate == 44100
    assert_speech(samples, rate, "Hello there, friend.")


async def test_speed_setting_shortens_audio(client):
    text = "This sentence is read several times at normal speed and several times faster than that."

    async def seconds(settings: dict) -> float:
        body = {"text": text, "voice_settings": settings}
        resp = await client.post("/v1/text-to-speech/v?output_format=pcm_22050", json=body)
        assert resp.status == 200
        return len(await resp.read()) / 2 / 22050

    # Piper's durations are stochastic (least so at stability 1.0); sums over two runs each make the 1/1.2 rate
    # change clear against a 0.95 bound.
    slow = await asyncio.gather(*(seconds({"stability": 1.0}) for _ in range(2)))
    fast = await asyncio.gather(*(seconds({"stability": 1.0, "speed": 1.2}) for _ in range(2)))
    assert sum(fast) < sum(slow) * 0.95, (slow, fast)


async def test_stream_sends_first_chunk_before_job_ends(client):
    # Four sentences: several chunks over about a second of synthesis (eight before; four prove the same).
    text = " ".join(f"Sentence number {n} is here to make the job long enough to notice." for n in range(4))
    resp = await client.post("/v1/text-to-speech/v/stream?output_format=pcm_22050", json={"text": text})
    assert resp.status == 200
    arrivals: list[float] = []
    data = bytearray()
    async for piece in resp.content.iter_any():
        arrivals.append(time.monotonic())
        data.extend(piece)
    assert len(arrivals) >= 3, "audio arrived in one piece, not streamed"
    # The first bytes came well before the last: the job was still running when the client got audio.
    assert arrivals[-1] - arrivals[0] > 0.3
    samples = np.frombuffer(bytes(data), dtype="<i2").astype(np.float32) / 32768
    assert_speech(samples, 22050, text)


async def test_stream_mp3_decodes(client):
    resp = await client.post("/v1/text-to-speech/v/stream", json={"text": TEXT})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "audio/mpeg"
    samples, rate = decode_audio(await resp.read(), "mp3_44100_128")
    assert_speech(samples, rate, TEXT)


@pytest.mark.parametrize(
    ("path", "kwargs", "status", "code"),
    [
        (
            "/v1/text-to-speech/v",
            {"data": b"not json", "headers": {"Content-Type": "application/json"}},
            400,
            "invalid_json",
        ),
        ("/v1/text-to-speech/v", {"json": {"model_id": "x"}}, 422, "invalid_parameters"),
        ("/v1/text-to-speech/v", {"json": {"text": "   "}}, 422, "invalid_parameters"),
        ("/v1/text-to-speech/v", {"json": {"text": 5}}, 422, "invalid_parameters"),
        ("/v1/text-to-speech/v", {"json": ["text"]}, 400, "invalid_json"),
        ("/v1/text-to-speech/v?output_format=mp3_1_2", {"json": {"text": "hi"}}, 400, "invalid_output_format"),
        ("/v1/text-to-speech/v/stream?output_format=wav_22050", {"json": {"text": "hi"}}, 400, "invalid_output_format"),
        ("/v1/text-to-speech/v/stream?output_format=", {"json": {"text": "hi"}}, 400, "invalid_output_format"),
        (
            "/v1/text-to-dialogue?output_format=",
            {"json": {"inputs": [{"text": "hi", "voice_id": "v"}]}},
            400,
            "invalid_output_format",
        ),
        ("/v1/text-to-speech/v", {"json": {"text": "x" * 10001}}, 400, "max_character_limit_exceeded"),
    ],
)
async def test_bad_requests_get_the_error_envelope(client, path, kwargs, status, code):
    resp = await client.post(path, **kwargs)
    assert resp.status == status
    body = await resp.json()
    assert body["detail"]["status"] == code
    assert body["detail"]["code"] == code
    assert isinstance(body["detail"]["message"], str) and body["detail"]["message"]
    assert body["detail"]["request_id"] == resp.headers["request-id"]


async def test_unknown_route_gets_envelope(client):
    resp = await client.get("/v1/nothing-here")
    assert resp.status == 404
    assert (await resp.json())["detail"]["status"] == "not_found"


async def test_concurrent_requests_share_each_worker_one_chunk_at_a_time(client, aredis, shared_workers):
    """Eight requests at once are all spoken in full by both workers. A worker may hold several of them and interleave
    their chunks (docs/scheduling.md), but it computes one chunk at a time (batch size 1): the seconds its slot
    computed never pass the wall-clock time the requests took."""
    from zsynth.core import protocol

    busy = "zsynth_worker_busy_seconds_total"
    before = {w.worker_id: sample_sum(scrape(w.metrics_url), busy) for w in shared_workers}
    started = time.monotonic()
    texts = [f"Request {n} asks for a short sentence of speech." for n in range(8)]
    responses = await asyncio.gather(
        *(client.post("/v1/text-to-speech/v?output_format=pcm_16000", json={"text": t}) for t in texts)
    )
    job_ids = []
    for resp, text in zip(responses, texts, strict=True):
        assert resp.status == 200
        samples, rate = decode_audio(await resp.read(), "pcm_16000")
        assert_speech(samples, rate, text)
        job_ids.append(resp.headers["history-item-id"])
    wall = time.monotonic() - started
    workers = set()
    for job_id in job_ids:
        record = {k.decode(): v.decode() for k, v in (await aredis.hgetall(protocol.job_key(job_id))).items()}
        assert record["state"] == "done"
        workers.add(record["worker_id"])
    assert len(workers) == 2, "both workers should have taken part"
    for worker in shared_workers:
        computed = sample_sum(scrape(worker.metrics_url), busy) - before[worker.worker_id]
        assert 0 < computed <= wall, f"{worker.worker_id} computed {computed:.2f} s in {wall:.2f} s: two at once"
