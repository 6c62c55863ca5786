"""Hostile input against the real app and workers: every answer is a prompt, clear error in the envelope, never a 5xx.

Odd voice ids (path separators, control characters, very long), uploads that lie about their type, bodies over
ZSYNTH_MAX_BODY_BYTES, invalid UTF-8, deep nesting, huge numbers, and header injection through echoed fields.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from yarl import URL

from harness.audio import assert_speech, decode_audio
from harness.base import make_settings
from harness.voice_clips import reference_file
from zsynth.speech.app import create_app

pytestmark = pytest.mark.stack

# Generous for a busy 2-core box, but a hang still fails the test instead of blocking the run.
TIMEOUT = aiohttp.ClientTimeout(total=60)
SMALL_BODY = 64 * 1024


async def envelope(resp: aiohttp.ClientResponse, status: int, code: str | None = None) -> dict:
    """Assert ``resp`` is the error envelope with ``status`` (and ``code``); return its detail."""
    text = await resp.text()
    assert resp.status == status, text
    assert resp.content_type == "application/json", text
    detail = json.loads(text)["detail"]
    assert {"status", "code", "type", "message", "request_id"} <= set(detail), detail
    assert detail["request_id"] == resp.headers["request-id"]
    if code is not None:
        assert detail["code"] == code, detail
    return detail


def raw_url(client, path: str) -> URL:
    """``path`` sent exactly as written (percent escapes kept, no dot-segment normalisation)."""
    return URL(str(client.make_url("")).rstrip("/") + path, encoded=True)


@pytest.fixture
async def small_client(aiohttp_client, redis_url, data_dir, shared_workers):
    """An app with a 64 KiB body limit, for JSON bodies and multipart uploads alike."""
    settings = make_settings(
        redis_url, data_dir, limits_max_body_bytes=SMALL_BODY, limits_max_json_body_bytes=SMALL_BODY
    )
    return await aiohttp_client(create_app(settings))


# ----- voice ids ---------------------------------------------------------------------------------------------------

ODD_IDS = [
    "..%2F..%2Fetc%2Fpasswd",
    "%2E%2E",
    "custom-..%2F..%2Fvoices",
    "custom-abcd%00efgh",
    "joe%0D%0AX-Injected:%201",
    "%E2%80%AE%F0%9F%98%80",
    "a%5Cb%5C..%5Cc",
    "x" * 4000,
]


@pytest.mark.parametrize("voice_id", ODD_IDS, ids=lambda v: v[:24])
async def test_odd_voice_ids_are_not_found_and_touch_nothing(client, data_dir, voice_id):
    before = sorted(p.name for p in (data_dir / "voices").iterdir())
    for method, path in (
        ("GET", f"/v1/voices/{voice_id}"),
        ("GET", f"/v1/voices/{voice_id}/settings"),
        ("DELETE", f"/v1/voices/{voice_id}"),
        ("DELETE", f"/voices/{voice_id}"),
    ):
        async with client.session.request(method, raw_url(client, path), timeout=TIMEOUT) as resp:
            detail = await envelope(resp, 404)
            assert detail["code"] in ("voice_not_found", "not_found"), detail
            assert "X-Injected" not in resp.headers
    assert sorted(p.name for p in (data_dir / "voices").iterdir()) == before


@pytest.mark.parametrize("voice_id", ["..%2F..%2Fetc%2Fpasswd", "joe%0D%0AX-Injected:%201", "y" * 3000])
async def test_odd_voice_ids_are_spoken_by_the_swapout_voice(client, voice_id):
    url = raw_url(client, f"/v1/text-to-speech/{voice_id}/stream?output_format=pcm_22050")
    async with client.session.post(url, json={"text": "Strange names are fine."}, timeout=TIMEOUT) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["x-voice-id"] == "joe"
        assert "X-Injected" not in resp.headers
        samples, rate = decode_audio(await resp.read(), "pcm_22050")
    assert_speech(samples, rate, "Strange names are fine.")


async def test_voice_id_past_the_request_line_limit_gets_a_400_not_a_hang(client):
    # aiohttp's parser refuses request lines over 8190 bytes before any zsynth code runs, in plain text.
    host, port = client.server.host, client.server.port
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET /v1/voices/{'z' * 20000} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 30)
    writer.close()
    assert status_line.split()[1] in (b"400", b"414"), status_line


# ----- uploads that lie --------------------------------------------------------------------------------------------


def upload(data: bytes, file_name: str, content_type: str) -> aiohttp.FormData:
    form = aiohttp.FormData(default_to_multipart=True)
    form.add_field("name", "Liar")
    form.add_field("files", data, filename=file_name, content_type=content_type)
    return form


PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40


@pytest.mark.parametrize(
    ("data", "file_name", "content_type"),
    [
        (PNG, "clip.wav", "audio/wav"),
        (b"RIFF\xff\xff\xff\x7fWAVEfmt " + b"\x00" * 64, "clip.wav", "audio/wav"),
        (b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff" * 5000, "clip.mp3", "audio/mpeg"),
        (b"fLaC" + b"\x00" * 4000, "clip.flac", "audio/flac"),
        (b"OggS" + b"\x01" * 4000, "../../etc/passwd", "audio/ogg"),
        (b"", "empty.wav", "audio/wav"),
    ],
    ids=["png-as-wav", "truncated-wav", "junk-mp3", "junk-flac", "junk-ogg-path-name", "empty"],
)
async def test_uploads_that_lie_about_their_type_get_400(client, data, file_name, content_type):
    for route in ("/voices", "/v1/voices/add"):
        async with client.post(route, data=upload(data, file_name, content_type), timeout=TIMEOUT) as resp:
            detail = await envelope(resp, 400)
            assert detail["param"] == "files", detail


async def test_speech_labelled_as_an_image_is_judged_by_its_content(client):
    # The declared type is not trusted either way: real audio with a wrong label still clones.
    form = upload(reference_file("wav"), "photo.png", "image/png")
    async with client.post("/v1/voices/add", data=form, timeout=TIMEOUT) as resp:
        assert resp.status == 200, await resp.text()
        voice_id = (await resp.json())["voice_id"]
    async with client.delete(f"/v1/voices/{voice_id}") as resp:
        assert resp.status == 200


@pytest.mark.parametrize(
    ("content_type", "body", "code"),
    [
        ("application/json", b'{"name": "x"}', "invalid_content_type"),
        ("multipart/form-data", b"--x\r\n\r\n", "invalid_multipart"),
        ("multipart/form-data; boundary=abc", b'{"name": "x"}', "invalid_multipart"),
        (
            "multipart/form-data; boundary=abc",
            b'--abc\r\nContent-Disposition: form-data; name="\x13"\r\n\r\nv\r\n',
            None,
        ),
        ("multipart/form-data; boundary=" + "b" * 200, b"--", "invalid_multipart"),
    ],
    ids=["json", "no-boundary", "json-in-multipart", "control-char-header", "long-boundary"],
)
async def test_bodies_that_lie_about_being_multipart_get_400(client, content_type, body, code):
    async with client.post("/voices", data=body, headers={"Content-Type": content_type}, timeout=TIMEOUT) as resp:
        await envelope(resp, 400, code)


# ----- size limits -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["/v1/text-to-speech/joe", "/v1/text-to-speech/joe/stream", "/v1/tokens/ephemeral"])
async def test_json_over_the_body_limit_gets_413(small_client, route):
    body = json.dumps({"text": "word " * (SMALL_BODY // 4)}).encode()
    async with small_client.post(route, data=body, headers={"Content-Type": "application/json"}) as resp:
        await envelope(resp, 413, "request_too_large")


async def test_multipart_over_the_body_limit_gets_413(small_client):
    # With a Content-Length: refused before reading.
    form = aiohttp.FormData(default_to_multipart=True)
    form.add_field("name", "Big")
    for n in range(40):
        form.add_field(f"field{n}", "v" * 4000)
    async with small_client.post("/voices", data=form, timeout=TIMEOUT) as resp:
        await envelope(resp, 413, "request_too_large")

    # Chunked, so no Content-Length: refused once the parts read pass the limit (many small fields).
    async def parts():
        yield b'--b\r\nContent-Disposition: form-data; name="name"\r\n\r\nBig\r\n'
        for n in range(40):
            yield f'--b\r\nContent-Disposition: form-data; name="f{n}"\r\n\r\n'.encode() + b"v" * 4000 + b"\r\n"
        yield b"--b--\r\n"

    headers = {"Content-Type": "multipart/form-data; boundary=b"}
    async with small_client.post("/v1/voices/add", data=parts(), headers=headers, timeout=TIMEOUT) as resp:
        await envelope(resp, 413, "request_too_large")


# ----- malformed JSON ----------------------------------------------------------------------------------------------

BAD_JSON = {
    "invalid-utf8": b'{"text": "caf\xe9 \xff\xfe"}',
    "lone-surrogate-bytes": b'{"text": "\xed\xa0\x80"}',
    "deep-array": b"[" * 100_000 + b"]" * 100_000,
    # Under ZSYNTH_MAX_JSON_BODY_BYTES (256 KiB), so it reaches the parser.
    "deep-in-field": b'{"text": "hi", "voice_settings": ' + b'{"a":' * 20_000 + b"1" + b"}" * 20_001,
    "5000-digit-number": b'{"text": "hi", "seed": ' + b"9" * 5000 + b"}",
    "nan": b'{"text": "hi", "voice_settings": {"speed": NaN}}',
    "truncated": b'{"text": "hi"',
    "not-an-object": b'"text"',
}


@pytest.mark.parametrize("body", BAD_JSON.values(), ids=BAD_JSON.keys())
@pytest.mark.parametrize("route", ["/v1/text-to-speech/joe", "/v1/text-to-speech/joe/stream", "/v1/tokens/ephemeral"])
async def test_malformed_json_gets_400(client, route, body):
    async with client.post(route, data=body, headers={"Content-Type": "application/json"}, timeout=TIMEOUT) as resp:
        # The open test box has no keys table, so a well-formed token request would get 501; malformed ones get 400.
        await envelope(resp, 400, "invalid_json")


async def test_a_bogus_declared_charset_is_ignored(client):
    headers = {"Content-Type": "application/json; charset=klingon"}
    async with client.post("/v1/text-to-speech/joe", data=b'{"text": "Hi."}', headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        assert_speech(*decode_audio(await resp.read(), "mp3_44100_128"), "Hi.")


@pytest.mark.parametrize(
    "voice_settings",
    [{"speed": {}}, {"stability": "high"}, {"speed": int("9" * 400)}, {"style": True}, {"use_speaker_boost": "yes"}],
    ids=["object", "string", "400-digits", "bool", "string-bool"],
)
async def test_mistyped_voice_settings_get_422(client, voice_settings):
    body = {"text": "Hi.", "voice_settings": voice_settings}
    async with client.post("/v1/text-to-speech/joe", json=body, timeout=TIMEOUT) as resp:
        detail = await envelope(resp, 422, "invalid_parameters")
        assert detail["param"].startswith("voice_settings")


async def test_deep_labels_in_a_clone_get_422(client):
    form = aiohttp.FormData(default_to_multipart=True)
    form.add_field("name", "Deep")
    form.add_field("files", reference_file("wav"), filename="ref.wav", content_type="audio/wav")
    form.add_field("labels", "[" * 30_000)
    async with client.post("/voices", data=form, timeout=TIMEOUT) as resp:
        detail = await envelope(resp, 422, "invalid_parameters")
        assert detail["param"] == "labels"


@pytest.mark.parametrize("route", ["/v1/text-to-speech/joe", "/v1/text-to-speech/joe/stream"])
async def test_control_characters_in_echoed_fields_do_not_break_headers(client, route):
    body = {"text": "Hello.", "model_id": "model\r\nX-Injected: 1\x00"}
    async with client.post(route, json=body, timeout=TIMEOUT) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["x-model-id"] == "modelX-Injected: 1"
        assert "X-Injected" not in resp.headers
        assert_speech(*decode_audio(await resp.read(), "mp3_44100_128"), "Hello.")


async def test_query_values_that_overflow_get_422(client):
    async with client.get("/v2/voices", params={"page_size": "9" * 5000}) as resp:
        await envelope(resp, 422, "invalid_parameters")
    async with client.post("/v1/text-to-speech/joe?output_format=" + "%FF" * 100, json={"text": "x"}) as resp:
        await envelope(resp, 400, "invalid_output_format")
