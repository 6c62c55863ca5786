"""Open WebUI's pickers, ``GET /v1/audio/voices`` and ``/v1/audio/models``, against a real ``zsynth serve``: asked
the way Open WebUI asks (no credentials), then every id used with the real ``openai`` SDK."""

from __future__ import annotations

import httpx
import openai
import pytest

from harness.audio import assert_speech, decode_audio
from harness.fronts import front_process
from harness.voice_clips import reference_file

pytestmark = pytest.mark.heavy

KEY = "pickers-static-key"
TEXT = "The pickers found this voice, and it speaks."


@pytest.fixture(scope="module")
def front(redis_url, data_dir, shared_workers):
    env = {"ZSYNTH_API_KEY": KEY, "ZSYNTH_OPENAI_VOICES": "alloy=joe"}
    with front_process(redis_url, data_dir, **env) as (_, base):
        yield base


@pytest.fixture(scope="module")
def clone_id(front) -> str:
    resp = httpx.post(
        f"{front}/v1/voices/add",
        headers={"xi-api-key": KEY},
        data={"name": "picker-clone"},
        files={"files": ("ref.wav", reference_file("wav"), "audio/wav")},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    return str(resp.json()["voice_id"])


def test_without_credentials_only_built_in_voices(front, clone_id):
    resp = httpx.get(f"{front}/v1/audio/voices", timeout=10)  # as Open WebUI asks: no Authorization header
    assert resp.status_code == 200, resp.text
    voices = resp.json()["voices"]
    assert voices[0] == {"id": "joe", "name": "Joe"}
    assert {"id": "alloy", "name": "alloy (Joe)"} in voices
    assert clone_id not in {v["id"] for v in voices}
    assert all(set(v) == {"id", "name"} and isinstance(v["name"], str) for v in voices)


@pytest.mark.parametrize("header", ["Authorization", "xi-api-key"])
def test_with_a_key_the_clones_too(front, clone_id, header):
    value = f"Bearer {KEY}" if header == "Authorization" else KEY
    voices = httpx.get(f"{front}/v1/audio/voices", headers={header: value}, timeout=10).json()["voices"]
    assert {"id": clone_id, "name": "picker-clone"} in voices


def test_a_refused_key_is_told_so(front):
    resp = httpx.get(f"{front}/v1/audio/voices", headers={"Authorization": "Bearer wrong"}, timeout=10)
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "invalid_api_key"


def test_models_picker(front):
    resp = httpx.get(f"{front}/v1/audio/models", timeout=10)
    assert resp.status_code == 200
    ids = [m["id"] for m in resp.json()["models"]]
    assert ids[0] == "zsynth_piper" and "tts-1" in ids


def test_every_picked_voice_and_model_speaks_with_the_openai_sdk(front, clone_id):
    sdk = openai.OpenAI(base_url=f"{front}/v1", api_key=KEY, max_retries=0)
    voices = httpx.get(f"{front}/v1/audio/voices", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).json()
    models = httpx.get(f"{front}/v1/audio/models", timeout=10).json()["models"]
    spoken: dict[str, str] = {}
    for index, voice in enumerate(voices["voices"]):
        model = models[index % len(models)]["id"]
        answer = sdk.audio.speech.with_raw_response.create(model=model, voice=voice["id"], input=TEXT)
        assert answer.headers["content-type"] == "audio/mpeg"  # MP3 stays the default (Open WebUI caches .mp3)
        assert answer.headers["x-model-id"] == model
        spoken[voice["id"]] = answer.headers["x-voice-id"]
        samples, rate = decode_audio(answer.content, "mp3_44100_128")
        assert_speech(samples, rate, TEXT)
    # No picked id fell through to the swap-out voice: each is spoken by itself (an alias by its target).
    assert spoken["alloy"] == "joe" and spoken[clone_id] == clone_id
    assert all(used == voice for voice, used in spoken.items() if voice != "alloy"), spoken
