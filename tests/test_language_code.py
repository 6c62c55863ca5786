"""``language_code`` on every synthesis route and socket: the engine's languages pass, others are refused before any
job, in the route's envelope (HTTP) or as an error frame before any audio (sockets)."""

from __future__ import annotations

import pytest

from harness.audio import assert_speech, decode_audio
from harness.ws import collect
from zsynth.core.languages import UnsupportedLanguage, check_language_code

TEXT = "Good morning, and welcome to the show."
ROUTES = ("", "/stream", "/with-timestamps", "/stream/with-timestamps")
BAD = ["de", "fa", "xx", "e", "english", "en;rm -rf", "d" * 300, 12, True, ["en"]]


@pytest.mark.unit
@pytest.mark.parametrize("code", [None, "", "  ", "en", "EN", "en-US", "en_GB"])
def test_the_engines_language_passes(code):
    expected = None if code is None or not str(code).strip() else "en"
    assert check_language_code("piper", None, code) == expected


@pytest.mark.unit
@pytest.mark.parametrize("code", BAD)
def test_anything_else_names_the_model_and_the_code(code):
    with pytest.raises(UnsupportedLanguage) as err:
        check_language_code("piper", "eleven_flash_v2_5", code)
    assert err.value.message.startswith("Model 'eleven_flash_v2_5' does not support language_code ")
    assert len(err.value.message) < 130  # a hostile code is not echoed whole


@pytest.mark.stack
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("code", BAD)
async def test_http_routes_refuse_a_language_the_engine_lacks(client, route, code):
    body = {"text": TEXT, "model_id": "eleven_turbo_v2_5", "language_code": code}
    resp = await client.post(f"/v1/text-to-speech/joe{route}", json=body)
    assert resp.status == 400, await resp.text()
    detail = (await resp.json())["detail"]
    assert detail["code"] == detail["status"] == "unsupported_language"
    assert detail["param"] == "language_code"
    assert detail["message"].startswith("Model 'eleven_turbo_v2_5' does not support language_code ")


@pytest.mark.stack
async def test_without_a_model_the_engines_model_is_named(client):
    resp = await client.post("/v1/text-to-speech/joe", json={"text": TEXT, "language_code": "de"})
    assert resp.status == 400
    assert (await resp.json())["detail"]["message"] == "Model 'zsynth_piper' does not support language_code 'de'."


@pytest.mark.stack
@pytest.mark.parametrize("code", ["en", "", None, "en-US"])
async def test_http_speaks_with_an_accepted_language(client, code):
    body = {"text": TEXT, "language_code": code}
    resp = await client.post("/v1/text-to-speech/joe?output_format=pcm_16000", json=body)
    assert resp.status == 200, await resp.text()
    samples, rate = decode_audio(await resp.read(), "pcm_16000")
    assert_speech(samples, rate, TEXT)


@pytest.mark.stack
@pytest.mark.parametrize("path", ["/v1/text-to-speech/joe/stream-input", "/v1/text-to-speech/joe/multi-stream-input"])
async def test_sockets_refuse_a_bad_language_before_any_audio(client, path):
    ws = await client.ws_connect(f"{path}?model_id=eleven_flash_v2_5&language_code=de")
    await ws.send_json({"text": " "})
    await ws.send_json({"text": TEXT + " ", "flush": True})
    got = await collect(ws)
    assert got.close_code == 1008
    assert not got.audio()
    assert got.frames[0]["error"] == "unsupported_language"
    assert got.frames[0]["message"] == "Model 'eleven_flash_v2_5' does not support language_code 'de'."


@pytest.mark.stack
async def test_socket_speaks_with_the_engines_language(client):
    ws = await client.ws_connect("/v1/text-to-speech/joe/stream-input?language_code=en&output_format=pcm_16000")
    await ws.send_json({"text": " "})
    await ws.send_json({"text": TEXT + " "})
    await ws.send_json({"text": ""})
    got = await collect(ws)
    assert got.close_code == 1000, got.frames
    samples, rate = decode_audio(got.audio(), "pcm_16000")
    assert_speech(samples, rate, TEXT)
