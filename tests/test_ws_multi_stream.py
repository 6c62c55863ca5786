"""The multi-stream-input socket: contexts, flush, close_context, close_socket, the 5-context limit."""

from __future__ import annotations

import base64
import json

import pytest

from harness.audio import assert_speech, decode_audio
from harness.ws import collect

pytestmark = pytest.mark.stack

PATH = "/v1/text-to-speech/any-voice/multi-stream-input?output_format=pcm_16000"


async def test_two_contexts_speak_and_close_with_one_final_each(client):
    ws = await client.ws_connect(PATH)
    first, second = "The first context says hello to you.", "The second context answers back politely."
    await ws.send_json({"text": " ", "context_id": "a"})
    await ws.send_json({"text": first + " ", "context_id": "a", "flush": True})
    await ws.send_json({"text": second + " ", "context_id": "b", "flush": True})
    await ws.send_json({"context_id": "a", "close_context": True})
    await ws.send_json({"context_id": "b", "close_context": True})
    await ws.send_json({"close_socket": True})
    got = await collect(ws)
    assert got.errors == []
    assert got.close_code == 1000
    assert sorted(f["contextId"] for f in got.finals) == ["a", "b"]
    for context, text in (("a", first), ("b", second)):
        samples, rate = decode_audio(got.audio(context), "pcm_16000")
        assert_speech(samples, rate, text)
        assert got.chars(context) == text
        # The context's isFinal comes after all of its audio.
        frames = [i for i, f in enumerate(got.frames) if f.get("contextId") == context]
        final = next(i for i, f in enumerate(got.frames) if f.get("isFinal") and f["contextId"] == context)
        assert final == frames[-1]
    assert all("contextId" in f for f in got.frames)


async def test_flush_sends_no_final_and_keepalive_closes_nothing(client):
    ws = await client.ws_connect(PATH)
    await ws.send_json({"text": " ", "context_id": "c"})
    await ws.send_json({"text": "Only a flush here. ", "context_id": "c", "flush": True})
    frame = json.loads((await ws.receive(timeout=30)).data)
    assert frame["contextId"] == "c" and frame["audio"]
    await ws.send_json({"text": "", "context_id": "c"})  # keep-alive
    await ws.send_json({"text": "Still open after the keep alive. ", "context_id": "c"})
    await ws.send_json({"context_id": "c", "flush": True})
    await ws.send_json({"context_id": "c", "close_context": True})
    await ws.send_json({"close_socket": True})
    got = await collect(ws)
    assert got.close_code == 1000
    assert [f["contextId"] for f in got.finals] == ["c"]
    assert (
        "".join(frame["alignment"]["chars"]) + got.chars("c") == "Only a flush here. Still open after the keep alive."
    )


async def test_sixth_context_is_refused(client):
    ws = await client.ws_connect(PATH)
    await ws.send_json({"text": " ", "context_id": "ctx0"})
    for n in range(1, 6):
        await ws.send_json({"text": "Hi ", "context_id": f"ctx{n}"})
    got = await collect(ws)
    assert got.close_code == 1008
    assert got.errors[0]["error"] == "max_active_conversations"
    assert "(5)" in got.errors[0]["message"]


async def test_closed_context_frees_its_place(client):
    ws = await client.ws_connect(PATH)
    await ws.send_json({"text": " ", "context_id": "ctx0"})
    for n in range(1, 5):
        await ws.send_json({"text": "Hi ", "context_id": f"ctx{n}"})
    await ws.send_json({"context_id": "ctx0", "close_context": True})
    await ws.send_json({"text": "A fresh context takes the freed place. ", "context_id": "ctx5", "flush": True})
    await ws.send_json({"close_socket": True})
    got = await collect(ws)
    assert got.errors == []
    assert got.close_code == 1000
    assert got.chars("ctx5") == "A fresh context takes the freed place."


async def test_default_context_has_null_context_id(client):
    ws = await client.ws_connect(PATH)
    await ws.send_json({"text": " "})
    await ws.send_json({"text": "No context id at all. ", "flush": True})
    await ws.send_json({"close_socket": True})
    got = await collect(ws)
    assert got.close_code == 1000
    assert got.frames and all(f["contextId"] is None for f in got.frames)
    assert len(got.finals) == 1 and got.chars(None) == "No context id at all."


async def test_multi_socket_inactivity(client):
    ws = await client.ws_connect(PATH.replace("?", "?inactivity_timeout=5&"))
    await ws.send_json({"text": " ", "context_id": "idle"})
    got = await collect(ws, timeout=15)
    assert got.close_code == 1008
    assert got.errors[0]["error"] == "input_timeout_exceeded"


async def test_agent_conversation_many_turns_on_one_socket(client):
    """A voice agent keeps one socket and speaks each turn in a new context: more turns than the context limit."""
    ws = await client.ws_connect(PATH)
    await ws.send_json({"text": " "})
    for turn in range(8):
        context, text = f"turn-{turn}", f"Turn number {turn} of the talk."
        await ws.send_json({"text": text + " ", "context_id": context, "flush": True})
        await ws.send_json({"context_id": context, "close_context": True})
        frames = []
        while True:
            frame = json.loads((await ws.receive(timeout=30)).data)
            assert "error" not in frame, frame
            frames.append(frame)
            if frame.get("isFinal"):
                break
        assert {f["contextId"] for f in frames} == {context}
        audio = b"".join(base64.b64decode(f["audio"]) for f in frames if f.get("audio"))
        samples, rate = decode_audio(audio, "pcm_16000")
        assert_speech(samples, rate, text)
    await ws.send_json({"close_socket": True})
    got = await collect(ws)
    assert got.close_code == 1000 and got.errors == []
