"""The stream-input socket end to end: official SDK and raw clients, real Redis, real Piper workers."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from elevenlabs.client import ElevenLabs
from elevenlabs.core.api_error import ApiError as ElevenLabsApiError

from harness.audio import assert_speech, decode_audio
from harness.base import make_settings
from harness.ws import collect, squash
from zsynth.speech.app import create_app

pytestmark = pytest.mark.stack

KEY = "sk-realtime-test-key"
TEXT = "Hello there, my friend. This is a realtime test of the socket, and it should speak every word we send."
PATH = "/v1/text-to-speech/any-voice/stream-input"


@pytest.fixture
async def keyed(aiohttp_client, redis_url, data_dir, shared_workers):
    """A front that requires the static key KEY."""
    return await aiohttp_client(create_app(make_settings(redis_url, data_dir, auth_api_keys=(KEY,))))


async def _speak(ws, text: str = TEXT, bos: dict | None = None) -> None:
    await ws.send_json(bos or {"text": " ", "voice_settings": {"stability": 0.5}})
    for word in text.split(" "):
        await ws.send_json({"text": word + " "})
    await ws.send_json({"text": ""})


def _check_alignment_covers_chunks(got, output_format: str) -> None:
    """Each frame's character times are monotone, start at 0 and end where the frame's audio ends."""
    rate = int(output_format.split("_")[1])
    for frame in got.frames:
        if not frame.get("alignment"):
            # Only an encoder's short flush at the end of a segment may come without characters of its own.
            assert len(base64.b64decode(frame.get("audio") or "")) / 2 / rate < 0.1
            continue
        al = frame["alignment"]
        assert len(al["chars"]) == len(al["charStartTimesMs"]) == len(al["charDurationsMs"])
        starts, durs = al["charStartTimesMs"], al["charDurationsMs"]
        assert starts[0] == 0
        assert all(isinstance(v, int) and v >= 0 for v in starts + durs)
        for i in range(1, len(starts)):
            assert starts[i] == starts[i - 1] + durs[i - 1], "character times are not contiguous"
        audio_ms = len(base64.b64decode(frame["audio"])) / 2 / rate * 1000
        assert abs(starts[-1] + durs[-1] - audio_ms) <= 1, (starts[-1] + durs[-1], audio_ms)
        assert frame["normalizedAlignment"] == al
        assert frame["isFinal"] is None


async def test_sdk_convert_realtime_speaks_mp3(client):
    """The official SDK's realtime helper, pointed at ws:// (it forces wss otherwise)."""
    sdk = ElevenLabs(base_url=f"http://127.0.0.1:{client.server.port}", api_key="unused")
    sdk.text_to_speech._ws_base_url = f"ws://127.0.0.1:{client.server.port}"

    def pieces():
        yield "Hello there, my friend. "
        yield "This sentence came from the official SDK, "
        yield "through the realtime socket."

    def run() -> bytes:
        return b"".join(sdk.text_to_speech.convert_realtime(voice_id="any-voice", text=pieces()))

    audio = await asyncio.wait_for(asyncio.to_thread(run), 90)
    samples, rate = decode_audio(audio, "mp3_44100_128")
    assert rate == 44100
    assert_speech(samples, rate, "".join(pieces()))


async def test_sdk_sees_auth_failure_as_1008(keyed):
    sdk = ElevenLabs(base_url=f"http://127.0.0.1:{keyed.server.port}", api_key="wrong-key")
    sdk.text_to_speech._ws_base_url = f"ws://127.0.0.1:{keyed.server.port}"

    def run() -> bytes:
        return b"".join(sdk.text_to_speech.convert_realtime(voice_id="v", text=iter(["Hello there. "])))

    with pytest.raises(ElevenLabsApiError) as info:
        await asyncio.wait_for(asyncio.to_thread(run), 30)
    assert info.value.status_code == 1008
    # The SDK reports the error frame when it has read it, else the close reason (the same message).
    body = info.value.body
    assert (body["error"] == "invalid_api_key") if isinstance(body, dict) else ("Invalid API key" in body)


@pytest.mark.parametrize(
    ("how", "output_format"),
    [
        ("authorization_header", "pcm_16000"),
        ("header", "pcm_22050"),
        ("bos_authorization", "pcm_24000"),
        ("bos_xi_api_key", "pcm_8000"),
    ],
)
async def test_raw_client_auth_audio_and_alignment(keyed, how, output_format):
    """Header auth (either header) and in-band auth all speak; alignment spells the text in order. (A token in the
    query: test_ws_tokens; a full key there is refused: test_auth_limits.)"""
    url = f"{PATH}?output_format={output_format}"
    headers = {}
    bos: dict = {"text": " "}
    if how == "authorization_header":
        headers["Authorization"] = f"Bearer {KEY}"
    elif how == "header":
        headers["xi-api-key"] = KEY
    elif how == "bos_authorization":
        bos["authorization"] = f"Bearer {KEY}"
    else:
        bos["xi_api_key"] = KEY
    ws = await keyed.ws_connect(url, headers=headers)
    await _speak(ws, bos=bos)
    got = await collect(ws)
    assert got.errors == []
    assert got.close_code == 1000
    assert got.finals == [{"isFinal": True}]
    assert got.frames[-1] == {"isFinal": True}, "isFinal must be the last frame"
    samples, rate = decode_audio(got.audio(), output_format)
    assert_speech(samples, rate, TEXT)
    assert got.chars() == squash(TEXT)
    _check_alignment_covers_chunks(got, output_format)


@pytest.mark.parametrize(("secret", "error"), [(None, "missing_api_key"), ("Bearer not-the-key", "invalid_api_key")])
async def test_bad_credentials_get_error_frame_and_1008(keyed, secret, error):
    ws = await keyed.ws_connect(PATH)
    bos = {"text": " "} if secret is None else {"text": " ", "authorization": secret}
    await ws.send_json(bos)
    await ws.send_json({"text": "This must never be spoken. "})
    got = await collect(ws)
    assert got.close_code == 1008
    assert [f["error"] for f in got.errors] == [error]
    assert got.errors[0]["code"] == 1008 and got.errors[0]["message"]
    assert got.audio() == b""


@pytest.mark.parametrize("bad", ["{not json", "[" * 100_000, '{"text": ' + "9" * 5000 + "}", '{"text": NaN}'])
async def test_malformed_json_gets_error_frame(client, bad):
    ws = await client.ws_connect(PATH)
    await ws.send_json({"text": " "})
    await ws.send_str(bad)  # not JSON, nested past the parser's depth, a number past its digit limit, NaN
    got = await collect(ws)
    assert got.close_code == 1008
    assert got.errors[0]["error"] == "invalid_json"


async def test_bad_output_format_gets_error_frame(client):
    ws = await client.ws_connect(f"{PATH}?output_format=wav_22050")
    got = await collect(ws)
    assert got.close_code == 1008
    assert got.errors[0]["error"] == "invalid_output_format"


async def test_unauthenticated_socket_must_send_its_first_message_soon(
    aiohttp_client, redis_url, data_dir, shared_workers
):
    """Only a socket that still has to authenticate in its first message gets the short first-message bound."""
    app = create_app(make_settings(redis_url, data_dir, auth_api_keys=(KEY,), ws_first_message_timeout_s=0.5))
    ws = await (await aiohttp_client(app)).ws_connect(PATH)
    got = await collect(ws, timeout=10)
    assert got.close_code == 1008
    assert got.errors[0]["error"] == "missing_first_message"


@pytest.fixture
async def quick(aiohttp_client, redis_url, data_dir, shared_workers):
    """A front whose default inactivity timeout is 1.5 s, so the timeout tests take seconds."""
    return await aiohttp_client(create_app(make_settings(redis_url, data_dir, ws_inactivity_timeout_s=1.5)))


async def test_inactivity_timeout(quick):
    ws = await quick.ws_connect(PATH)
    await ws.send_json({"text": " "})
    got = await collect(ws, timeout=10)
    assert got.close_code == 1008
    assert got.errors[0]["error"] == "input_timeout_exceeded"
    assert "1.5 seconds" in got.errors[0]["message"]


@pytest.mark.parametrize("value", ["4", "181", "0", "ten"])
async def test_inactivity_timeout_out_of_range(client, value):
    ws = await client.ws_connect(f"{PATH}?inactivity_timeout={value}")
    got = await collect(ws, timeout=10)
    assert got.close_code == 1008
    assert got.errors[0]["error"] == "invalid_parameters"
    assert "inactivity_timeout" in got.errors[0]["message"]


async def test_keepalive_resets_the_timer_and_flush_speaks_without_final(quick):
    ws = await quick.ws_connect(f"{PATH}?output_format=pcm_16000")
    await ws.send_json({"text": " "})
    for _ in range(4):  # 3 s of keep-alives: twice the 1.5 s timeout
        await asyncio.sleep(0.75)
        await ws.send_json({"text": " "})
    await ws.send_json({"text": "Short. ", "flush": True})
    frame = json.loads((await ws.receive(timeout=30)).data)
    assert frame["audio"] and frame["isFinal"] is None
    assert "".join(frame["alignment"]["chars"]) == "Short."
    await ws.send_json({"text": "And one more thing. "})
    await ws.send_json({"text": ""})
    got = await collect(ws)
    assert got.close_code == 1000
    assert got.finals == [{"isFinal": True}]
    assert got.chars() == " And one more thing."
    assert got.errors == []


async def test_schedule_never_cuts_a_word(client):
    """Text sent in pieces that split words still arrives as whole words in the alignment."""
    ws = await client.ws_connect(f"{PATH}?output_format=pcm_16000")
    text = "Incomprehensibilities notwithstanding, the extraordinarily long words arrive piece by piece today."
    await ws.send_json({"text": " ", "generation_config": {"chunk_length_schedule": [50]}})
    for i in range(0, len(text), 7):  # pieces cut mid-word
        await ws.send_json({"text": text[i : i + 7], "try_trigger_generation": True})
    await ws.send_json({"text": " "})
    await ws.send_json({"text": ""})
    got = await collect(ws)
    assert got.close_code == 1000
    assert got.chars() == text
    frames = [f for f in got.frames if f.get("alignment")]
    assert len(frames) >= 2, "the schedule should have released a segment before the end"
    for frame in frames:
        chars = "".join(frame["alignment"]["chars"]).strip()
        assert all(word in text.split() for word in chars.split()), chars


async def test_bad_schedule_is_refused(client):
    ws = await client.ws_connect(PATH)
    await ws.send_json({"text": " ", "generation_config": {"chunk_length_schedule": [10]}})
    got = await collect(ws)
    assert got.close_code == 1008
    assert got.errors[0]["error"] == "invalid_message"


async def test_frames_stay_under_one_mebibyte(client):
    """A long sentence at the largest PCM rate is split across frames, each with its share of the alignment."""
    text = " ".join(["This sentence keeps going on and on, with many words and no full stop"] * 4) + "."
    ws = await client.ws_connect(f"{PATH}?output_format=pcm_44100", max_msg_size=1024 * 1024)
    await _speak(ws, text)
    got = await collect(ws, timeout=120)
    assert got.close_code == 1000, got.errors
    samples, rate = decode_audio(got.audio(), "pcm_44100")
    assert_speech(samples, rate, text)
    assert got.chars() == squash(text)
