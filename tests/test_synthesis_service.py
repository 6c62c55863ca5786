"""One synthesis service: every transport shows a failure as the same classified error, and checks voice settings
the same way (HTTP routes, both realtime sockets, the avatar)."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp
import pytest
from redis.asyncio import Redis

from harness.avatar import Viewer, open_session
from harness.base import LONG_TEXT, make_settings
from harness.workers import WorkerProcess
from harness.ws import collect
from zsynth.avatar.app import create_avatar_app
from zsynth.core import protocol
from zsynth.services.dispatch import JobFailed
from zsynth.services.synthesis import classify
from zsynth.speech.app import create_app

KEY = "synthesis-service-key"
DIED = "The worker died while speaking."


async def _started_jobs(redis_url: str, workers: list[WorkerProcess]) -> int:
    """How many of ``workers`` are speaking a job whose audio has started."""
    redis = Redis.from_url(redis_url)
    try:
        started = 0
        for worker in workers:
            for raw in await redis.lrange(protocol.processing_key(worker.worker_id), 0, -1):
                job = protocol.Job.from_json(raw)
                started += bool(await redis.hexists(protocol.job_key(job.job_id), protocol.STARTED_FIELD))
        return started
    finally:
        await redis.aclose()


@pytest.mark.heavy
async def test_a_dead_worker_is_the_same_classified_error_on_every_transport(
    aiohttp_client, private_redis_url, tmp_path, loopback_ice, caplog
) -> None:
    """Eight workers each speak one transport's job; all eight are killed; a survivor reaps them (worker_died).

    HTTP whole-body (ElevenLabs convert and with-timestamps): 503 system_busy with Retry-After; HTTP streams with
    audio already sent (ElevenLabs stream and stream/with-timestamps, OpenAI's speech): the transfer is cut and the
    failure logged with its kind; both realtime sockets: error frame synthesis_unavailable, close 1008; the avatar:
    an ``error`` event synthesis_unavailable. Every one carries the worker's own message.
    """
    failure = classify(JobFailed("worker_died", DIED))
    assert (failure.kind, failure.http_status, failure.code, failure.realtime_code, failure.retry_after) == (
        "unavailable",
        503,
        "system_busy",
        "synthesis_unavailable",
        1,
    )
    caplog.set_level(logging.WARNING, logger="zsynth.speech.synthesis_http")
    victims = [WorkerProcess(private_redis_url, f"victim-{n}", tmp_path) for n in range(8)]
    survivor: WorkerProcess | None = None
    viewer = Viewer()
    try:
        for victim in victims:
            await asyncio.to_thread(victim.wait_ready)
        # Deadlines far beyond the reaper's few seconds: the failure seen must be the worker's death, not a timeout.
        slow = {"jobs_first_chunk_timeout_s": 60.0, "jobs_chunk_timeout_s": 60.0}
        front = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path, **slow)))
        avatar_settings = make_settings(
            private_redis_url, tmp_path, auth_api_keys=(KEY,), avatar_connect_timeout_s=30.0, **slow
        )
        avatar = await aiohttp_client(create_avatar_app(avatar_settings))
        headers = {"X-Api-Key": KEY}

        # The avatar session first (WebRTC takes a moment), then one job per transport, one per victim.
        _, control = await open_session(avatar, viewer, headers)

        body = {"text": LONG_TEXT}
        wholes = [
            asyncio.ensure_future(front.post(f"/v1/text-to-speech/v{path}?output_format=pcm_16000", json=body))
            for path in ("", "/with-timestamps")
        ]
        streams = [
            await front.post("/v1/text-to-speech/v/stream?output_format=pcm_22050", json=body),
            await front.post("/v1/text-to-speech/v/stream/with-timestamps?output_format=pcm_22050", json=body),
            await front.post(
                "/v1/audio/speech", json={"model": "tts-1", "input": LONG_TEXT, "voice": "v", "response_format": "pcm"}
            ),
        ]
        for stream in streams:
            assert stream.status == 200
            assert await stream.content.readany()
        sockets = []
        for path, context in (("stream-input", {}), ("multi-stream-input", {"context_id": "doomed"})):
            socket = await front.ws_connect(f"/v1/text-to-speech/v/{path}?output_format=pcm_16000")
            await socket.send_json({"text": " ", **context})
            await socket.send_json({"text": LONG_TEXT + " ", "flush": True, **context})
            first_frame = json.loads((await socket.receive(timeout=60)).data)
            assert first_frame.get("audio"), first_frame
            sockets.append(asyncio.ensure_future(collect(socket, timeout=60)))  # read on, so its close is answered
        await control.ws.send_json({"type": "speak", "text": LONG_TEXT, "id": "doomed"})
        await control.next("speak.accepted")

        deadline = time.monotonic() + 90
        while await _started_jobs(private_redis_url, victims) < len(victims):
            assert time.monotonic() < deadline, "the eight jobs did not all start on the eight victims"
            await asyncio.sleep(0.1)
        for victim in victims:
            victim.kill()
        # A surviving worker's reaper ends every started job of the dead ones with worker_died.
        survivor = WorkerProcess(private_redis_url, "survivor", tmp_path)

        for whole in await asyncio.wait_for(asyncio.gather(*wholes), 60):
            assert whole.status == failure.http_status
            assert whole.headers["Retry-After"] == str(failure.retry_after)
            detail = (await whole.json())["detail"]
            assert (detail["status"], detail["code"], detail["message"]) == (failure.code, failure.code, DIED)

        for stream in streams:
            with pytest.raises(aiohttp.ClientPayloadError):
                await asyncio.wait_for(stream.read(), 60)
            job_id = stream.headers["history-item-id"]
            assert any(
                f"job {job_id} failed mid-stream: {failure.kind} (worker_died: {DIED})" in r.getMessage()
                for r in caplog.records
            ), [r.getMessage() for r in caplog.records]

        for socket_got in sockets:
            got = await socket_got
            assert got.close_code == 1008
            assert got.errors == [{"message": DIED, "error": failure.realtime_code, "code": 1008}], got.frames

        error = await control.next("error")
        assert (error["code"], error["message"], error["id"]) == (failure.realtime_code, DIED, "doomed")
        await control.ws.close()
    finally:
        await viewer.close()
        for victim in victims:
            victim.stop()
        if survivor is not None:
            survivor.stop()


BAD_SETTINGS = [
    ({"speed": "fast"}, "voice_settings.speed", "voice_settings.speed must be a number."),
    ({"stability": 10**400}, "voice_settings.stability", "voice_settings.stability must be a number."),
    (
        {"use_speaker_boost": "yes"},
        "voice_settings.use_speaker_boost",
        "voice_settings.use_speaker_boost must be true or false.",
    ),
    ("loud", "voice_settings", "Field 'voice_settings' must be an object."),
]


@pytest.mark.stack
@pytest.mark.parametrize(("settings", "param", "message"), BAD_SETTINGS, ids=["string", "huge", "boost", "not-object"])
async def test_bad_voice_settings_are_refused_alike_on_http_and_both_sockets(
    aiohttp_client, private_redis_url, tmp_path, settings, param, message
) -> None:
    client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))

    resp = await client.post("/v1/text-to-speech/v", json={"text": "Hello.", "voice_settings": settings})
    assert resp.status == 422
    detail = (await resp.json())["detail"]
    assert (detail["code"], detail["param"], detail["message"]) == ("invalid_parameters", param, message)
    refused = {"message": message, "error": detail["code"], "code": 1008}

    # stream-input: the first message carries the socket's settings.
    ws = await client.ws_connect("/v1/text-to-speech/v/stream-input")
    await ws.send_json({"text": " ", "voice_settings": settings})
    got = await collect(ws, timeout=20)
    assert got.close_code == 1008 and got.errors == [refused], got.frames

    # multi-stream-input: each context's first message carries that context's settings.
    ws = await client.ws_connect("/v1/text-to-speech/v/multi-stream-input")
    await ws.send_json({"text": "Hello ", "context_id": "good", "voice_settings": {"speed": 1.1}})
    await ws.send_json({"text": "Hello ", "context_id": "bad", "voice_settings": settings})
    got = await collect(ws, timeout=20)
    assert got.close_code == 1008 and got.errors == [refused], got.frames

    redis = Redis.from_url(private_redis_url)
    try:
        assert await redis.llen(protocol.QUEUE) == 0, "a refused request queued a job"
    finally:
        await redis.aclose()


@pytest.mark.stack
async def test_a_full_queue_is_system_busy_on_http_and_the_socket(aiohttp_client, private_redis_url, tmp_path) -> None:
    """No worker, a queue of one: a waiting job fills it, then HTTP answers 429 and the socket an error frame."""
    settings = make_settings(private_redis_url, tmp_path, jobs_max_queue=1, jobs_first_chunk_timeout_s=3)
    client = await aiohttp_client(create_app(settings))
    waiting = asyncio.ensure_future(client.post("/v1/text-to-speech/v", json={"text": "Waiting in the queue."}))
    redis = Redis.from_url(private_redis_url)
    try:
        for _ in range(100):
            if await redis.llen(protocol.QUEUE) == 1:
                break
            await asyncio.sleep(0.02)
        assert await redis.llen(protocol.QUEUE) == 1
    finally:
        await redis.aclose()

    resp = await client.post("/v1/text-to-speech/v", json={"text": "One too many."})
    detail = (await resp.json())["detail"]
    assert (resp.status, resp.headers["Retry-After"], detail["code"]) == (429, "1", "system_busy")

    ws = await client.ws_connect("/v1/text-to-speech/v/stream-input?output_format=pcm_16000")
    await ws.send_json({"text": " "})
    await ws.send_json({"text": "One too many on a socket.", "flush": True})
    got = await collect(ws, timeout=20)
    assert got.close_code == 1008 and got.audio() == b"", got.frames
    assert [(e["error"], e["code"]) for e in got.errors] == [("system_busy", 1008)], got.frames
    assert (await waiting).status == 503  # nobody served it within the deadline
