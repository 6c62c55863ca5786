"""The swap-out voice for unknown ids (with and without the pin); cloned voices surviving a restart of everything."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from harness.audio import assert_speech, decode_audio
from harness.base import ROOT, free_port, make_settings
from harness.voice_clips import reference_file
from harness.workers import WorkerProcess
from zsynth.services.voices import VoiceConfigError
from zsynth.speech.app import create_app

TEXT = "Another provider's client gets speech here."  # short: every call here is a Piper synthesis
STOCK_ID = "21m00Tcm4TlvDq8ikWAM"  # a stock id hard-coded in many ElevenLabs clients


async def clone(front, name: str) -> str:
    form = aiohttp.FormData()
    form.add_field("name", name)
    form.add_field("file", reference_file("wav"), filename="ref.wav", content_type="audio/wav")
    resp = await front.post("/voices", data=form)
    assert resp.status == 200, await resp.text()
    return str((await resp.json())["voice_id"])


async def speak(front, voice_id: str) -> tuple[str, float]:
    resp = await front.post(f"/v1/text-to-speech/{voice_id}?output_format=pcm_22050", json={"text": TEXT})
    assert resp.status == 200, await resp.text()
    samples, rate = decode_audio(await resp.read(), "pcm_22050")
    return resp.headers["x-voice-id"], assert_speech(samples, rate, TEXT)


@pytest.mark.stack
async def test_unknown_voice_is_spoken_by_the_first_builtin_voice(client):
    used, _ = await speak(client, STOCK_ID)
    assert used == "joe"
    stream = await client.post(f"/v1/text-to-speech/{STOCK_ID}/stream?output_format=mp3_44100_128", json={"text": TEXT})
    assert stream.status == 200 and stream.headers["x-voice-id"] == "joe"
    assert_speech(*decode_audio(await stream.read(), "mp3_44100_128"), TEXT)
    assert (await client.get(f"/v1/voices/{STOCK_ID}")).status == 404


@pytest.mark.stack
async def test_pinned_swapout_voice_serves_unknown_ids(aiohttp_client, client, redis_url, data_dir):
    voice_id = await clone(client, "swap-out target")
    try:
        pinned = await aiohttp_client(
            create_app(make_settings(redis_url, data_dir, voices_swapout_default_voice=voice_id))
        )
        used, _ = await speak(pinned, STOCK_ID)
        assert used == voice_id
        # The with-timestamps routes swap too (they share the speech routes' submit).
        timed = await pinned.post(f"/v1/text-to-speech/{STOCK_ID}/with-timestamps", json={"text": TEXT})
        assert timed.status == 200 and timed.headers["x-voice-id"] == voice_id
        body = await timed.json()
        assert_speech(*decode_audio(base64.b64decode(body["audio_base64"]), "mp3_44100_128"), TEXT)
        assert "".join(body["alignment"]["characters"]) == TEXT
        assert (await speak(pinned, "joe"))[0] == "joe"  # known voices are never swapped
        assert (await pinned.get(f"/v1/voices/{STOCK_ID}")).status == 404
        refused = await pinned.delete(f"/voices/{voice_id}")
        assert refused.status == 400 and "ZSYNTH_SWAPOUT_DEFAULT_VOICE" in (await refused.json())["detail"]["message"]
    finally:
        assert (await client.delete(f"/voices/{voice_id}")).status == 200


@pytest.mark.stack
async def test_pinned_builtin_is_accepted(aiohttp_client, redis_url, data_dir, shared_workers):
    front = await aiohttp_client(create_app(make_settings(redis_url, data_dir, voices_swapout_default_voice="joe")))
    assert (await speak(front, "no-such-voice"))[0] == "joe"


@pytest.mark.stack
async def test_pinned_voice_that_does_not_exist_stops_startup(redis_url, tmp_path):
    # A bare TestServer, not the aiohttp_client fixture: that one leaves its client session open when startup fails.
    server = TestServer(create_app(make_settings(redis_url, tmp_path, voices_swapout_default_voice="custom-gone")))
    try:
        with pytest.raises(VoiceConfigError, match="ZSYNTH_SWAPOUT_DEFAULT_VOICE='custom-gone' is not a voice"):
            await server.start_server()
    finally:
        await server.close()


@pytest.mark.heavy
def test_serve_exits_with_a_clear_message_when_the_pin_is_missing(redis_url, tmp_path):
    env = dict(
        os.environ,
        ZSYNTH_REDIS_URL=redis_url,
        ZSYNTH_DATA_DIR=str(tmp_path),
        ZSYNTH_PORT=str(free_port()),
        ZSYNTH_SWAPOUT_DEFAULT_VOICE="custom-gone",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "zsynth", "serve"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert "ZSYNTH_SWAPOUT_DEFAULT_VOICE='custom-gone' is not a voice on this box" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.heavy
async def test_cloned_voice_survives_a_restart_of_every_process(aiohttp_client, private_redis_url, tmp_path):
    worker = WorkerProcess(private_redis_url, "restart-1", tmp_path).wait_ready()
    try:
        front = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
        voice_id = await clone(front, "durable")
        await front.close()
    finally:
        worker.stop()

    worker = WorkerProcess(private_redis_url, "restart-2", tmp_path).wait_ready()
    try:
        front = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
        listed = await (await front.get("/v1/voices")).json()
        assert voice_id in {v["voice_id"] for v in listed["voices"]}
        used, seconds = await speak(front, voice_id)
        assert used == voice_id and seconds > 1.0
        # The worker cached the reference's pitch next to the voice, for every worker of the box.
        assert (tmp_path / "voices" / voice_id / "cache" / "piper-pitch.json").is_file()
    finally:
        worker.stop()
