"""Vapi's custom voice against a real ``zsynth serve``: the request Vapi's documentation shows, replayed as Vapi sends
it, answered with raw PCM at the asked rate; and the bodies Vapi should never send."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from harness.audio import assert_speech
from harness.fronts import front_process

pytestmark = pytest.mark.heavy

KEY = "vapi-static-key"
TEXT = "Hello, this is your assistant speaking through a custom voice."


def voice_request(text: str = TEXT, rate: object = 24000, voice_id: str | None = "joe") -> dict:
    """The body of Vapi's documented voice request (docs.vapi.ai, custom TTS), with the call fields it sends."""
    message: dict = {
        "type": "voice-request",
        "text": text,
        "sampleRate": rate,
        "timestamp": 1677123456789,
        "call": {"id": "call_123", "orgId": "org_456", "type": "inboundPhoneCall"},
        "assistant": {"id": "asst_789", "name": "Support", "voice": {"provider": "custom-voice"}},
        "customer": {"number": "+14155551234"},
    }
    if voice_id is not None:
        message["assistant"]["voice"]["voiceId"] = voice_id
    return {"message": message}


@pytest.fixture(scope="module")
def front(redis_url, data_dir, shared_workers):
    with front_process(redis_url, data_dir, ZSYNTH_API_KEY=KEY) as (_, base):
        yield base


def post(front: str, body: object, headers: dict[str, str] | None = None) -> httpx.Response:
    auth = {"X-VAPI-SECRET": KEY} if headers is None else headers
    return httpx.post(
        f"{front}/v1/vapi/tts", json=body, headers={"Content-Type": "application/json", **auth}, timeout=60
    )


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 24000, 44100])
def test_raw_pcm_at_the_asked_rate(front, rate):
    resp = post(front, voice_request(rate=rate))
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "application/octet-stream"
    assert resp.headers["x-voice-id"] == "joe"
    assert not resp.content.startswith(b"RIFF") and len(resp.content) % 2 == 0
    samples = np.frombuffer(resp.content, dtype="<i2").astype(np.float32) / 32768.0
    assert_speech(samples, rate, TEXT)


@pytest.mark.parametrize(
    "headers",
    [{"X-VAPI-SECRET": KEY}, {"x-vapi-secret": KEY}, {"X-Vapi-Secret": KEY}, {"Authorization": f"Bearer {KEY}"}],
)
def test_the_secret_in_any_case_or_a_bearer_key(front, headers):
    assert post(front, voice_request(rate=16000), headers).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"X-VAPI-SECRET": "wrong"}])
def test_no_or_a_wrong_secret_gets_401(front, headers):
    resp = post(front, voice_request(), headers)
    assert resp.status_code == 401
    assert resp.json()["detail"]["code"] in ("missing_api_key", "invalid_api_key")


def test_without_a_voice_the_swap_out_voice_speaks(front):
    resp = post(front, voice_request(rate=16000, voice_id=None))
    assert resp.status_code == 200 and resp.headers["x-voice-id"] == "joe"
    unknown = post(front, voice_request(rate=16000, voice_id="some-elevenlabs-id"))
    assert unknown.status_code == 200 and unknown.headers["x-voice-id"] == "joe"


def test_audio_streams_as_it_is_made(front):
    text = " ".join(f"This is sentence number {n} of a longer answer." for n in range(8))
    arrivals: list[float] = []
    with httpx.stream(
        "POST", f"{front}/v1/vapi/tts", json=voice_request(text, 16000), headers={"X-VAPI-SECRET": KEY}, timeout=60
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers.get("transfer-encoding") == "chunked"
        start = time.monotonic()
        for chunk in resp.iter_raw():
            if chunk:
                arrivals.append(time.monotonic() - start)
    assert len(arrivals) > 1 and arrivals[-1] - arrivals[0] > 0.05, arrivals


@pytest.mark.parametrize("rate", [12345, 0, -8000, 48000, 10**30, 24000.5, "24000", None, True, [24000]])
def test_absurd_rates_get_400(front, rate):
    resp = post(front, voice_request(rate=rate))
    assert resp.status_code == 400, resp.text
    detail = resp.json()["detail"]
    assert detail["code"] == "invalid_sample_rate" and detail["param"] == "message.sampleRate"
    assert len(detail["message"]) < 140


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"message": None},
        {"message": "voice-request"},
        {"message": {"type": "voice-request", "sampleRate": 24000}},
        {"message": {"type": "voice-request", "text": "   ", "sampleRate": 24000}},
        {"message": {"type": "voice-request", "text": 42, "sampleRate": 24000}},
        {"message": {"type": "status-update", "text": TEXT, "sampleRate": 24000}},
        {"message": {"text": TEXT, "sampleRate": 24000}},
        [1, 2],
    ],
)
def test_missing_or_wrong_fields_are_refused_in_the_envelope(front, body):
    resp = post(front, body)
    assert resp.status_code in (400, 422), resp.text
    assert resp.json()["detail"]["code"] in ("invalid_parameters", "invalid_json")


def test_huge_text_gets_400_before_any_byte(front):
    resp = post(front, voice_request(text="word " * 200_000))
    assert resp.status_code in (400, 413)
    assert resp.headers["content-type"].startswith("application/json")


def test_bad_json_gets_400(front):
    resp = httpx.post(f"{front}/v1/vapi/tts", content=b"{not json", headers={"X-VAPI-SECRET": KEY}, timeout=30)
    assert resp.status_code == 400 and resp.json()["detail"]["code"] == "invalid_json"
