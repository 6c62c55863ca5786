"""The text-to-dialogue sockets against a real ``zsynth serve``, driven message by message as pipecat 1.14's
``ElevenLabsDialogueTTSService`` drives ``/v1/text-to-dialogue/multi-stream-input`` (clients-2.md §4: pipecat itself
cannot be installed next to the pinned packages), with an idle period longer than the socket's inactivity timeout
bridged by its keep-alives."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
import websockets

from harness.audio import assert_speech, decode_audio
from harness.fronts import front_process

pytestmark = pytest.mark.heavy

KEY = "dialogue-ws-static-key"
INACTIVITY_S = 4  # the server's idle timeout here; pipecat's keep-alive period is scaled down to match (10 s of 20)
KEEPALIVE = "pipecat-keepalive"
TURN_ONE = ["Good morning, how are you today? ", "I hope the weather is kind to you. "]
TURN_TWO = ["Thank you, I am doing well. "]


@pytest.fixture(scope="module")
def front(redis_url, data_dir, shared_workers):
    env = {"ZSYNTH_API_KEY": KEY, "ZSYNTH_WS_INACTIVITY_TIMEOUT": str(INACTIVITY_S)}
    with front_process(redis_url, data_dir, **env) as (_, base):
        yield base.replace("http", "ws", 1)


def url(base: str, path: str = "multi-stream-input", **query: str) -> str:
    params = {"model_id": "eleven_v3_conversational", "output_format": "pcm_16000", "sync_alignment": "true", **query}
    return f"{base}/v1/text-to-dialogue/{path}?" + "&".join(f"{k}={v}" for k, v in params.items())


async def read_until(ws: Any, done: Any, timeout: float = 60) -> list[dict[str, Any]]:
    """Frames until ``done(frame)`` is true for one (included)."""
    frames: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            frame = json.loads(await ws.recv())
            frames.append(frame)
            if done(frame):
                return frames


def audio_of(frames: list[dict[str, Any]], context: str) -> bytes:
    return b"".join(base64.b64decode(f["audio"]) for f in frames if f.get("audio") and f.get("context_id") == context)


async def speak_turn(ws: Any, context: str, voice: str, sentences: list[str]) -> list[dict[str, Any]]:
    """A turn as pipecat sends it: open the context, sentences (new_turn on the first), flush, then close_context."""
    await ws.send(json.dumps({"context_id": context, "voices": [voice], "voice_settings": {"stability": 0.5}}))
    for index, sentence in enumerate(sentences):
        entry: dict[str, Any] = {"text": sentence, "voice_id": voice}
        if index == 0:
            entry["new_turn"] = True
        await ws.send(json.dumps({"context_id": context, "inputs": [entry]}))
    await ws.send(json.dumps({"context_id": context, "flush": True}))
    frames = await read_until(ws, lambda f: f.get("is_final_audio_for_turn") and f.get("context_id") == context)
    await ws.send(json.dumps({"context_id": context, "close_context": True}))
    frames += await read_until(ws, lambda f: f.get("is_final") and f.get("context_id") == context)
    return frames


async def test_a_pipecat_conversation_with_an_idle_period(front):
    async with websockets.connect(url(front), additional_headers={"xi-api-key": KEY}) as ws:
        await ws.send(json.dumps({"context_id": KEEPALIVE, "voices": ["joe"]}))
        frames = await speak_turn(ws, "turn-1", "joe", TURN_ONE)
        assert not [f for f in frames if f.get("error")], frames
        assert sum(1 for f in frames if f.get("is_final_audio_for_turn")) == 1  # exactly one per flush
        assert_speech(*decode_audio(audio_of(frames, "turn-1"), "pcm_16000"), "".join(TURN_ONE))
        aligned = [f["alignment"] for f in frames if f.get("alignment")]
        assert aligned and all(a["char_start_times_ms"][0] < 400 for a in aligned)  # restart at 0 in every frame
        assert "".join(c for a in aligned for c in a["chars"]).split() == "".join(TURN_ONE).split()
        assert {"char_start_times_ms", "char_durations_ms", "chars"} == set(aligned[0])
        # Idle for longer than the inactivity timeout, kept alive as pipecat does.
        for _ in range(3):
            await asyncio.sleep(INACTIVITY_S * 0.6)
            await ws.send(json.dumps({"context_id": KEEPALIVE, "keep_alive": True}))
        frames = await speak_turn(ws, "turn-2", "joe", TURN_TWO)
        assert_speech(*decode_audio(audio_of(frames, "turn-2"), "pcm_16000"), "".join(TURN_TWO))
        await ws.send(json.dumps({"close_socket": True}))
        async with asyncio.timeout(10):
            async for _ in ws:
                pass
        assert ws.close_code == 1000


async def test_two_voices_in_one_context_and_an_unregistered_one(front):
    async with websockets.connect(url(front), additional_headers={"xi-api-key": KEY}) as ws:
        await ws.send(json.dumps({"context_id": "c", "voices": ["joe", "Rachel-elsewhere"]}))
        await ws.send(json.dumps({"context_id": "nope", "inputs": [{"text": "Hello. ", "voice_id": "joe"}]}))
        refused = await read_until(ws, lambda f: f.get("error"))
        assert refused[-1]["error"] == "context_not_found" and refused[-1]["context_id"] == "nope"
        inputs = [{"text": "Hello there, friend. ", "voice_id": "joe"}, {"text": "Hi back.", "voice_id": "other"}]
        await ws.send(json.dumps({"context_id": "c", "inputs": inputs}))
        refused = await read_until(ws, lambda f: f.get("error"))
        assert refused[-1]["error"] == "voice_not_registered"
        await ws.send(
            json.dumps({"context_id": "c", "inputs": [{"text": "And me too.", "voice_id": "Rachel-elsewhere"}]})
        )
        await ws.send(json.dumps({"context_id": "c", "flush": True}))
        frames = await read_until(ws, lambda f: f.get("is_final_audio_for_turn"))
        assert_speech(*decode_audio(audio_of(frames, "c"), "pcm_16000"), "Hello there, friend. And me too.")
        await ws.send(json.dumps({"context_id": "c", "close_context": True}))
        await read_until(ws, lambda f: f.get("is_final"))
        await ws.send(json.dumps({"context_id": "c", "inputs": [{"text": "Too late.", "voice_id": "joe"}]}))
        refused = await read_until(ws, lambda f: f.get("error"))
        assert refused[-1]["error"] == "context_not_found"


async def test_barge_in_stops_the_context(front):
    long_text = " ".join(f"This is sentence number {n} of a long answer." for n in range(12))
    async with websockets.connect(url(front), additional_headers={"xi-api-key": KEY}) as ws:
        await ws.send(json.dumps({"context_id": "b", "voices": ["joe"]}))
        await ws.send(json.dumps({"context_id": "b", "inputs": [{"text": long_text, "voice_id": "joe"}]}))
        await read_until(ws, lambda f: f.get("audio"))
        await ws.send(json.dumps({"context_id": "b", "close_context": True}))
        frames = await read_until(ws, lambda f: f.get("is_final"))
        heard = len(audio_of(frames, "b")) / 2 / 16000
        assert heard < 8, heard  # not the whole answer


async def test_stream_input_one_context(front):
    async with websockets.connect(url(front, "stream-input"), additional_headers={"xi-api-key": KEY}) as ws:
        await ws.send(json.dumps({"voices": ["joe"]}))
        await ws.send(json.dumps({"inputs": [{"text": "One context only, spoken here.", "voice_id": "joe"}]}))
        await ws.send(json.dumps({"flush": True}))
        frames = await read_until(ws, lambda f: f.get("is_final_audio_for_turn"))
        assert all("context_id" not in f for f in frames)
        assert_speech(*decode_audio(audio_of_default(frames), "pcm_16000"), "One context only, spoken here.")


def audio_of_default(frames: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(f["audio"]) for f in frames if f.get("audio"))


@pytest.mark.parametrize("query", [{"language_code": "de"}, {"output_format": "wav_16000"}])
async def test_bad_query_is_an_error_frame_before_any_audio(front, query):
    frames: list[dict[str, Any]] = []
    async with websockets.connect(url(front, **query), additional_headers={"xi-api-key": KEY}) as ws:
        with pytest.raises(websockets.ConnectionClosedError):
            async with asyncio.timeout(10):
                async for raw in ws:
                    frames.append(json.loads(raw))
        assert ws.close_code == 1008
    assert frames and frames[0]["error"] in ("unsupported_language", "invalid_output_format"), frames
    assert not any(f.get("audio") for f in frames)


async def test_a_single_use_token_opens_a_dialogue_socket(front):
    import httpx

    http = front.replace("ws", "http", 1)
    token = httpx.post(f"{http}/v1/single-use-token/tts_websocket", headers={"xi-api-key": KEY}).json()["token"]
    async with websockets.connect(url(front, single_use_token=token)) as ws:
        frames = await speak_turn(ws, "t", "joe", ["Opened with a token. "])
        assert audio_of(frames, "t")


@pytest.mark.parametrize("voices", [[], [f"v{n}" for n in range(11)], "joe", [42], ["x" * 500]])
async def test_bad_voice_lists_end_the_socket(front, voices):
    frames: list[dict[str, Any]] = []
    async with websockets.connect(url(front), additional_headers={"xi-api-key": KEY}) as ws:
        await ws.send(json.dumps({"context_id": "c", "voices": voices}))
        with pytest.raises(websockets.ConnectionClosedError):
            async with asyncio.timeout(10):
                async for raw in ws:
                    frames.append(json.loads(raw))
        assert ws.close_code == 1008
    assert frames[0]["error"] == "invalid_message"
