"""The OpenAPI document: valid 3.1, exactly the routes the app registers, and real answers that match it."""

from __future__ import annotations

import base64
import json

import aiohttp
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from harness.audio import assert_speech, decode_audio
from harness.base import make_settings
from harness.voice_clips import reference_file
from zsynth.documents import build_document
from zsynth.services.keys import SETTINGS
from zsynth.speech.app import create_app

from .openapi_helpers import DOC, Checker, documented, registered


@pytest.mark.unit
def test_document_is_valid_openapi_31():
    assert DOC["openapi"].startswith("3.1")
    validate(DOC)
    # The avatar server's document is built the same way (its routes are added when that server is wired).
    validate(build_document("avatar"))
    with pytest.raises(ValueError):
        build_document("nope")  # type: ignore[arg-type]  # an unknown server name is refused


@pytest.mark.unit
def test_every_schema_is_a_valid_json_schema():
    for schema in DOC["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)  # raises, naming the fault


@pytest.mark.stack
def test_document_lists_exactly_the_registered_routes(settings):
    app = create_app(settings)
    assert registered(app) == documented()


@pytest.mark.unit
def test_operations_document_their_security_and_media_types():
    # The pickers are public (Open WebUI asks without a key); a credential only adds the clones.
    public = {"/healthz", "/readyz", "/openapi.json", "/v1/audio/voices", "/v1/audio/models"}
    for path, item in DOC["paths"].items():
        for method, op in item.items():
            assert op["security"] == ([] if path in public else DOC["security"]), (method, path)
            if path.startswith("/v1/text-to-speech/"):
                media = set(op["responses"]["200"]["content"])
                if path.endswith("/with-timestamps"):
                    assert media == {"application/json"}
                else:
                    assert {"audio/mpeg", "audio/pcm", "audio/ogg"} <= media
                formats = next(p for p in op["parameters"] if p["name"] == "output_format")["schema"]["enum"]
                assert ("wav_44100" in formats) == ("/stream" not in path)
    assert set(DOC["components"]["securitySchemes"]) == {"ApiKeyHeader", "BearerAuth"}


@pytest.mark.stack
async def test_document_is_served_without_a_key(aiohttp_client, redis_url, data_dir, shared_workers):
    settings = make_settings(redis_url, data_dir, auth_api_key="secret-key", limits_max_text_chars=321)
    client = await aiohttp_client(create_app(settings))
    async with client.get("/openapi.json") as resp:
        assert resp.status == 200
        served = await resp.json()
    assert served == build_document("speech", settings)
    assert served["components"]["schemas"]["TextToSpeechRequest"]["properties"]["text"]["maxLength"] == 321
    async with client.get("/v1/models") as resp:
        assert resp.status == 401


def clone_form(name: str | None, clip: bytes | None) -> aiohttp.FormData:
    form = aiohttp.FormData(default_to_multipart=True)
    if name is not None:
        form.add_field("name", name)
    if clip is not None:
        form.add_field("files", clip, filename="ref.wav", content_type="audio/wav")
    return form


@pytest.mark.stack
async def test_real_answers_match_the_document(client):
    """A sample of successful and failing calls on every route, each checked against the document."""
    c = Checker()
    assert (await c.call(client, "GET", "/healthz"))[0] == 200
    assert (await c.call(client, "GET", "/readyz"))[0] == 200
    assert (await c.call(client, "GET", "/openapi.json"))[1] == build_document("speech", client.app[SETTINGS])
    assert (await c.call(client, "GET", "/metrics"))[0] == 200
    assert (await c.call(client, "GET", "/v1/models"))[0] == 200
    assert (await c.call(client, "GET", "/v1/user"))[0] == 200
    assert (await c.call(client, "GET", "/v1/user/subscription"))[0] == 200
    # Ephemeral tokens need a keys table: this open box answers 501 in the envelope.
    assert (await c.call(client, "POST", "/v1/tokens/ephemeral", json={"ttl_seconds": 60}))[0] == 501
    assert (await c.call(client, "POST", "/v1/tokens/ephemeral", data=b"[1, 2"))[0] == 400
    single = "/v1/single-use-token/{token_type}"
    assert (await c.call(client, "POST", single, token_type="tts_websocket"))[1]["token"].startswith("sutkn_")
    assert (await c.call(client, "POST", single, token_type="realtime_scribe"))[0] == 400

    voices = await c.call(client, "GET", "/v1/voices")
    assert voices[1]["voices"][0]["voice_id"] == "joe"
    status, page = await c.call(client, "GET", "/v2/voices", query="?page_size=1&sort=name&sort_direction=asc")
    assert status == 200 and len(page["voices"]) == 1
    assert (await c.call(client, "GET", "/v2/voices", query="?page_size=0"))[0] == 422
    assert (await c.call(client, "GET", "/v2/voices", query="?next_page_token=%25%25"))[0] == 400
    assert (await c.call(client, "GET", "/v1/voices/settings/default"))[0] == 200
    assert (await c.call(client, "GET", "/v1/voices/{voice_id}", voice_id="joe"))[0] == 200
    assert (await c.call(client, "GET", "/v1/voices/{voice_id}", voice_id="nobody"))[0] == 404
    assert (await c.call(client, "GET", "/v1/voices/{voice_id}/settings", voice_id="joe"))[0] == 200
    assert (await c.call(client, "GET", "/v1/voices/{voice_id}/settings", voice_id="nobody"))[0] == 404

    tts = "/v1/text-to-speech/{voice_id}"
    status, audio = await c.call(client, "POST", tts, voice_id="joe", json={"text": "Hello there."})
    assert status == 200 and len(audio) > 1000
    pcm = await c.call(client, "POST", tts, voice_id="joe", query="?output_format=pcm_16000", json={"text": "Hi."})
    assert pcm[0] == 200
    bad_format = await c.call(client, "POST", tts, voice_id="joe", query="?output_format=nope", json={"text": "x"})
    assert bad_format[0] == 400
    assert (await c.call(client, "POST", tts, voice_id="joe", json={"text": " "}))[0] == 422
    assert (await c.call(client, "POST", tts, voice_id="joe", json={"text": "x", "seed": -1}))[0] == 422
    stream = tts + "/stream"
    assert (await c.call(client, "POST", stream, voice_id="joe", json={"text": "Streaming now."}))[0] == 200
    assert (await c.call(client, "POST", stream, voice_id="joe", query="?output_format=wav_16000", json={}))[0] == 400
    assert (await c.call(client, "POST", stream, voice_id="joe", data=b"{not json"))[0] == 400

    text = "Timing every character."
    status, timed = await c.call(client, "POST", tts + "/with-timestamps", voice_id="joe", json={"text": text})
    assert status == 200 and "".join(timed["alignment"]["characters"]) == text
    assert_speech(*decode_audio(base64.b64decode(timed["audio_base64"]), "mp3_44100_128"), text)
    query = "?output_format=wav_16000"
    assert (await c.call(client, "POST", stream + "/with-timestamps", voice_id="joe", query=query, json={}))[0] == 400
    status, lines = await c.call(
        client,
        "POST",
        stream + "/with-timestamps",
        voice_id="joe",
        query="?output_format=pcm_16000",
        json={"text": text},
    )
    assert status == 200 and lines
    assert "".join(ch for line in lines if line["alignment"] for ch in line["alignment"]["characters"]) == text
    pcm_audio = b"".join(base64.b64decode(line["audio_base64"]) for line in lines)
    assert_speech(*decode_audio(pcm_audio, "pcm_16000"), text)

    speech = "/v1/audio/speech"
    status, mp3 = await c.call(client, "POST", speech, json={"model": "tts-1", "voice": "alloy", "input": text})
    assert status == 200 and len(mp3) > 1000
    assert_speech(*decode_audio(mp3, "mp3_44100_128"), text)
    sse = {"model": "m", "voice": {"id": "joe"}, "input": text, "response_format": "aac", "stream_format": "sse"}
    status, events = await c.call(client, "POST", speech, json=sse)
    assert status == 200
    parsed = [json.loads(line[len(b"data: ") :]) for line in events.split(b"\n") if line.startswith(b"data: ")]
    assert parsed and parsed[-1]["type"] == "speech.audio.done", events[-500:]
    aac = b"".join(base64.b64decode(e["audio"]) for e in parsed if e["type"] == "speech.audio.delta")
    # The audio itself is decoded and heard in test_openai_speech.py::test_sse_deltas_then_done; here, the shape.
    assert len(aac) > 1000 and parsed[-1]["usage"]["input_tokens"] == len(text)
    assert (await c.call(client, "POST", speech, json={"model": "m", "voice": "alloy", "input": " "}))[0] == 422
    bad_format = {"model": "m", "voice": "alloy", "input": "x", "response_format": "ogg"}
    assert (await c.call(client, "POST", speech, json=bad_format))[0] == 400

    assert (await c.call(client, "GET", "/v1/audio/voices"))[1]["voices"][0]["id"] == "joe"
    turns = {"inputs": [{"text": text, "voice_id": "joe"}, {"text": "And a reply.", "voice_id": "joe"}]}
    status, pcm = await c.call(client, "POST", "/v1/text-to-dialogue", query="?output_format=pcm_16000", json=turns)
    assert status == 200
    assert_speech(*decode_audio(pcm, "pcm_16000"), text + " And a reply.")
    assert (await c.call(client, "POST", "/v1/text-to-dialogue/stream", json=turns))[0] == 200
    status, timed = await c.call(client, "POST", "/v1/text-to-dialogue/with-timestamps", json=turns)
    assert status == 200 and len(timed["voice_segments"]) == 2
    status, lines = await c.call(client, "POST", "/v1/text-to-dialogue/stream/with-timestamps", json=turns)
    assert status == 200 and lines
    assert (await c.call(client, "POST", "/v1/text-to-dialogue", json={"inputs": []}))[0] == 422
    vapi = {"message": {"type": "voice-request", "text": text, "sampleRate": 16000}}
    status, pcm = await c.call(client, "POST", "/v1/vapi/tts", json=vapi)
    assert status == 200
    assert_speech(*decode_audio(pcm, "pcm_16000"), text)
    vapi["message"]["sampleRate"] = 12345
    assert (await c.call(client, "POST", "/v1/vapi/tts", json=vapi))[0] == 400
    assert (await c.call(client, "GET", "/v1/audio/models"))[1]["models"][0]["id"] == "zsynth_piper"

    clip = reference_file("wav")
    assert (await c.call(client, "POST", "/voices", data=clone_form(None, clip)))[0] == 422
    assert (await c.call(client, "POST", "/voices", json={"name": "x"}))[0] == 400
    status, voice = await c.call(client, "POST", "/voices", data=clone_form("OpenAPI clone", clip))
    assert status == 200 and voice["category"] == "cloned"
    assert (await c.call(client, "DELETE", "/voices/{voice_id}", voice_id=voice["voice_id"]))[0] == 200
    assert (await c.call(client, "DELETE", "/voices/{voice_id}", voice_id=voice["voice_id"]))[0] == 404
    assert (await c.call(client, "POST", "/v1/voices/add", data=clone_form("x", b"not audio at all")))[0] == 400
    status, added = await c.call(client, "POST", "/v1/voices/add", data=clone_form("OpenAPI add", clip))
    assert status == 200
    vid = added["voice_id"]
    renamed = aiohttp.FormData(default_to_multipart=True)
    renamed.add_field("name", "OpenAPI edited")
    assert (await c.call(client, "POST", "/v1/voices/{voice_id}/edit", voice_id=vid, data=renamed))[0] == 200
    unnamed = aiohttp.FormData(default_to_multipart=True)
    unnamed.add_field("name", "")
    assert (await c.call(client, "POST", "/v1/voices/{voice_id}/edit", voice_id=vid, data=unnamed))[0] == 422
    saved = {"stability": 0.8}
    path = "/v1/voices/{voice_id}/settings/edit"
    assert (await c.call(client, "POST", path, voice_id=vid, json=saved))[0] == 200
    assert (await c.call(client, "POST", path, voice_id=vid, json={"speed": "fast"}))[0] == 422
    assert (await c.call(client, "POST", path, voice_id="custom-NotThereAtAll", json=saved))[0] == 404
    assert (await c.call(client, "DELETE", "/v1/voices/{voice_id}", voice_id=added["voice_id"]))[0] == 200
    assert (await c.call(client, "DELETE", "/v1/voices/{voice_id}", voice_id="joe"))[0] == 400

    base = "/v1/pronunciation-dictionaries"
    alias = {"type": "alias", "string_to_replace": "NASA", "alias": "National Aeronautics and Space Administration"}
    status, made = await c.call(client, "POST", base + "/add-from-rules", json={"name": "d", "rules": [alias]})
    assert status == 200
    bad_rule = {"name": "d", "rules": [{"type": "phoneme", "string_to_replace": "x", "phoneme": "x"}]}
    assert (await c.call(client, "POST", base + "/add-from-rules", json=bad_rule))[0] == 422
    lexicon = aiohttp.FormData()
    lexicon.add_field("name", "lexicon")
    pls = b'<lexicon xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa"><lexeme>'
    pls += b"<grapheme>tomato</grapheme><phoneme>t\xc9\x99m\xc9\x91to\xca\x8a</phoneme></lexeme></lexicon>"
    lexicon.add_field("file", pls, filename="l.pls", content_type="application/pls+xml")
    assert (await c.call(client, "POST", base + "/add-from-file", data=lexicon))[0] == 200
    assert (await c.call(client, "GET", base, query="?page_size=1&sort=name"))[0] == 200
    one = base + "/{dictionary_id}"
    assert (await c.call(client, "GET", one, dictionary_id=made["id"]))[0] == 200
    assert (await c.call(client, "GET", one, dictionary_id="missing"))[0] == 404
    assert (await c.call(client, "PATCH", one, dictionary_id=made["id"], json={"name": "renamed"}))[0] == 200
    rules = {"rules": [alias | {"string_to_replace": "ESA", "alias": "European Space Agency"}]}
    assert (await c.call(client, "POST", one + "/add-rules", dictionary_id=made["id"], json=rules))[0] == 200
    assert (await c.call(client, "POST", one + "/set-rules", dictionary_id=made["id"], json=rules))[0] == 200
    strings = {"rule_strings": ["ESA"]}
    assert (await c.call(client, "POST", one + "/remove-rules", dictionary_id=made["id"], json=strings))[0] == 200
    version = one + "/{version_id}/download"
    status, pls_body = await c.call(client, "GET", version, dictionary_id=made["id"], version_id=made["version_id"])
    assert status == 200
    assert b"NASA" in pls_body, pls_body  # the first version holds the rule it was made from
    assert (await c.call(client, "GET", version, dictionary_id=made["id"], version_id="nope"))[0] == 404
    assert (await c.call(client, "DELETE", one, dictionary_id=made["id"]))[0] == 200
    assert (await c.call(client, "DELETE", one, dictionary_id=made["id"]))[0] == 404

    assert c.seen == documented(), f"not exercised: {documented() - c.seen}"


@pytest.mark.stack
async def test_auth_failures_match_the_document(aiohttp_client, redis_url, data_dir, shared_workers):
    client = await aiohttp_client(create_app(make_settings(redis_url, data_dir, auth_api_key="secret-key")))
    c = Checker()
    assert (await c.call(client, "GET", "/v1/voices"))[0] == 401
    assert (await c.call(client, "GET", "/metrics", headers={"xi-api-key": "wrong"}))[0] == 401
    assert (await c.call(client, "GET", "/metrics", headers={"Authorization": "Bearer secret-key"}))[0] == 200
    assert (await c.call(client, "POST", "/v1/tokens/ephemeral", headers={"xi-api-key": "secret-key"}))[0] == 501
    openai_body = {"model": "m", "voice": "alloy", "input": "Hi."}
    status, body = await c.call(client, "POST", "/v1/audio/speech", json=openai_body)
    assert status == 401 and body["error"]["code"] == "missing_api_key"
