"""One worker, several streams: the slot is shared chunk by chunk, earliest deadline first (docs/scheduling.md).

Real redis-server, real worker processes on the simulated engine (load tests only: it holds the slot for a set time
per chunk of real PCM, so the figures here are the scheduler's, not an engine's), the real front in process.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import redis
from redis.asyncio import Redis

from harness.audio import decode_audio
from harness.base import make_settings
from harness.stores import redis_text
from harness.workers import WorkerProcess
from zsynth.core import protocol
from zsynth.speech.app import create_app

pytestmark = pytest.mark.heavy

SIM = {"ZSYNTH_ENGINE": "simulated", "ZSYNTH_LOAD_TEST_ONLY": "1", "ZSYNTH_SIM_CHUNK_AUDIO": "0.5"}
STREAM_INPUT = "/v1/text-to-speech/agent/stream-input?output_format=pcm_24000"
STREAM = "/v1/text-to-speech/any/stream?output_format=pcm_24000"
# 17 words: 6.8 s of audio at the simulated engine's 2.5 words a second, 14 chunks of 0.5 s (the last one whole).
TURN = "Thanks for calling today, I can certainly help you with that order and its delivery right away."
LINE = "One moment please."  # 3 words: 1.2 s, 3 chunks


def _sim_worker(url: str, data: Path, name: str, hold_s: float, **env: str) -> WorkerProcess:
    return WorkerProcess(url, f"{name}-{time.monotonic_ns()}", data, ZSYNTH_SIM_CHUNK_HOLD=str(hold_s), **SIM, **env)


def _seconds(body: bytes) -> float:
    samples, rate = decode_audio(body, "pcm_24000")
    assert float(np.abs(samples).max()) > 0.05  # sound, not silence
    return len(samples) / rate


async def _speak_turn(client: Any, text: str, first_audio: asyncio.Future[float] | None = None) -> tuple[float, float]:
    """One stream-input turn (flush, then close): seconds to its first audio and seconds of audio heard."""
    ws = await client.ws_connect(STREAM_INPUT)
    await ws.send_json({"text": " "})
    started = time.monotonic()
    await ws.send_json({"text": text + " ", "flush": True})
    await ws.send_json({"text": ""})
    first: float | None = None
    audio = b""
    while (msg := await ws.receive(timeout=60)).type is aiohttp.WSMsgType.TEXT:
        frame = json.loads(msg.data)
        assert "error" not in frame, frame
        if frame.get("audio"):
            import base64

            audio += base64.b64decode(frame["audio"])
            if first is None:
                first = time.monotonic() - started
                if first_audio is not None:
                    first_audio.set_result(first)
        if frame.get("isFinal"):
            break
    await ws.close()
    assert first is not None, "no audio"
    return first, _seconds(audio)


@pytest.mark.timeout(120)
async def test_an_agent_s_first_audio_does_not_wait_behind_another_agent_s_whole_turn(
    aiohttp_client, private_redis_url, tmp_path
):
    """The issue's cause, on one worker at an RTF of 0.4: a turn takes 14 chunks of 0.2 s (2.8 s of the slot). A
    second agent's line, flushed once the first turn's audio has started, gets its first audio after about one chunk,
    not after the whole turn; both turns are heard whole."""
    worker = _sim_worker(private_redis_url, tmp_path, "interleave", 0.2).wait_ready()
    try:
        client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
        started: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        turn = asyncio.create_task(_speak_turn(client, TURN, started))
        await asyncio.wait_for(started, 30)
        line_first, line_audio = await _speak_turn(client, LINE)
        # One chunk is 0.2 s; the whole turn would be about 2.6 s more. Generous for a busy box, far under the turn.
        assert line_first < 1.2, f"the second agent waited {line_first:.2f} s for its first audio"
        assert not turn.done(), "the first turn should still be speaking"
        turn_first, turn_audio = await turn
        assert (turn_audio, line_audio) == (7.0, 1.5)
    finally:
        worker.stop()


@pytest.mark.timeout(120)
async def test_a_worker_busy_with_a_first_chunk_leaves_the_next_turns_to_a_free_worker(
    aiohttp_client, private_redis_url, tmp_path
):
    """Four turns at once on two workers, one slow (1.5 s a chunk) and one fast (0.05 s): the slow worker claims one
    turn and, while that turn's first chunk is being made, claims no other; the fast worker takes the other three,
    so their first audio never waits behind the slow worker's chunk. Every turn is heard whole."""
    slow = _sim_worker(private_redis_url, tmp_path, "slow", 1.5).wait_ready()
    try:
        # Started second, the fast worker waits on the queue behind the slow one: the first turn goes to the slow one.
        fast = _sim_worker(private_redis_url, tmp_path, "fast", 0.05).wait_ready()
        try:
            client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
            held: list[int] = []
            reader = Redis.from_url(private_redis_url)

            async def watch() -> None:
                while True:
                    held.append(await reader.llen(protocol.processing_key(slow.worker_id)))
                    await asyncio.sleep(0.01)

            watching = asyncio.create_task(watch())
            try:
                turns = await asyncio.gather(*(_speak_turn(client, LINE) for _ in range(4)))
            finally:
                watching.cancel()
                await reader.aclose()
        finally:
            fast.stop()
    finally:
        slow.stop()
    assert [audio for _, audio in turns] == [1.5] * 4
    assert max(held) == 1, f"the slow worker held {max(held)} turns at once"
    # Three first audios came from the fast worker before the slow one's first chunk was made; holding a second turn,
    # the slow worker would have made one of them wait for two of its chunks.
    firsts = sorted(first for first, _ in turns)
    assert firsts[2] < 1.5 <= firsts[3], firsts


async def _request_without_reading(port: int, path: str, body: bytes) -> Any:
    """A POST on a socket with a small receive buffer that is never read."""
    import socket

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    await loop.sock_sendall(sock, head + body)
    return sock


async def _until(predicate: Any, timeout: float, what: str) -> None:
    """Poll ``predicate`` (without blocking the loop, which serves the front) until true, at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.05)


def _in_flight(url: str, worker: WorkerProcess) -> list[protocol.Job]:
    client = redis.Redis.from_url(url)
    try:
        return [protocol.Job.from_json(raw) for raw in client.lrange(protocol.processing_key(worker.worker_id), 0, -1)]
    finally:
        client.close()


@pytest.mark.timeout(120)
async def test_a_client_that_reads_nothing_holds_no_slot(aiohttp_client, private_redis_url, tmp_path):
    """A stream waiting for flow-control credit is parked: the worker's one slot serves another request at once,
    while the unread stream stays held (in the in-flight list, no terminal yet) until its front gives up on it."""
    worker = _sim_worker(private_redis_url, tmp_path, "parked", 0.02).wait_ready()
    settings = make_settings(private_redis_url, tmp_path, flow_write_timeout_s=60.0)
    client = await aiohttp_client(create_app(settings))
    long_text = " ".join(["a long reading that nobody reads"] * 120)  # 720 words: 288 s of audio, 25 MB at 44.1 kHz
    body = json.dumps({"text": long_text}).encode()
    sock = await _request_without_reading(
        client.server.port, "/v1/text-to-speech/any/stream?output_format=pcm_44100", body
    )
    try:
        await _until(lambda: _in_flight(private_redis_url, worker), 20, "the unread stream claimed")
        (unread,) = _in_flight(private_redis_url, worker)
        # Its window and the socket buffers fill within a few seconds at this engine's pace; then it is parked.
        await asyncio.sleep(4.0)
        started = time.monotonic()
        resp = await client.post(STREAM, json={"text": LINE})
        assert resp.status == 200
        assert _seconds(await resp.read()) == 1.5
        elapsed = time.monotonic() - started
        # Before streams, the unread job held the worker until its front gave up (ZSYNTH_FLOW_WAIT, 12 s).
        assert elapsed < 3.0, f"{elapsed:.2f} s for a short request beside an unread stream"
        assert [job.job_id for job in _in_flight(private_redis_url, worker)] == [unread.job_id]
        reader = redis.Redis.from_url(private_redis_url)
        assert reader.hget(protocol.job_key(unread.job_id), "state") is None, "the unread stream should be held"
        reader.close()
    finally:
        sock.close()
        worker.stop()


@pytest.mark.timeout(120)
async def test_a_cancel_stops_one_stream_and_no_other(aiohttp_client, private_redis_url, tmp_path):
    """Two long streams on one worker, computed chunk by chunk in turn: the client that goes away ends its own job
    (cancelled), and the other stream is heard whole."""
    worker = _sim_worker(private_redis_url, tmp_path, "cancel", 0.05).wait_ready()
    try:
        client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
        text = " ".join(["twenty words of speech"] * 5)  # 20 words: 8 s, 16 chunks
        kept = await client.post(STREAM, json={"text": text})
        gone = await client.post(STREAM, json={"text": text})
        assert kept.status == gone.status == 200
        assert await gone.content.readany()
        gone_id = gone.headers["history-item-id"]
        await _until(lambda: len(_in_flight(private_redis_url, worker)) == 2, 10, "both streams held by the one worker")
        gone.close()
        assert _seconds(await kept.read()) == 8.0
        reader = Redis.from_url(private_redis_url)
        try:
            deadline = time.monotonic() + 10
            while (state := await reader.hget(protocol.job_key(gone_id), "code")) is None:
                assert time.monotonic() < deadline, "the cancelled stream never ended"
                await asyncio.sleep(0.05)
            assert redis_text(state) == "cancelled"
        finally:
            await reader.aclose()
    finally:
        worker.stop()


def _stop_requested(worker: WorkerProcess, sig: signal.Signals) -> None:
    worker.proc.send_signal(sig)


@pytest.mark.timeout(120)
async def test_stop_signals_finish_every_stream_then_abort_them_all(aiohttp_client, private_redis_url, tmp_path):
    """The first stop signal lets every stream the worker holds finish (and claims nothing more); the second one ends
    each stream still held with worker_stopping, so no client is left waiting."""
    worker = _sim_worker(private_redis_url, tmp_path, "stopping", 0.05).wait_ready()
    try:
        client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path, jobs_chunk_timeout_s=5.0)))
        short = " ".join(["twenty words of speech"] * 5)  # 8 s: 16 chunks, under 2 s of the slot for two streams
        finishing = [await client.post(STREAM, json={"text": short}) for _ in range(2)]
        await _until(lambda: len(_in_flight(private_redis_url, worker)) == 2, 10, "both streams held")
        _stop_requested(worker, signal.SIGTERM)
        assert [_seconds(await resp.read()) for resp in finishing] == [8.0, 8.0]
        worker.proc.wait(15)
        assert worker.proc.returncode == 0

        worker = _sim_worker(private_redis_url, tmp_path, "aborted", 0.05).wait_ready()
        long_text = " ".join(["a long reading to be stopped"] * 60)  # 360 words: 288 chunks, 14 s of the slot
        aborted = [await client.post(STREAM, json={"text": long_text}) for _ in range(2)]
        for resp in aborted:
            assert await resp.content.readany()
        await _until(lambda: len(_in_flight(private_redis_url, worker)) == 2, 10, "both streams held")
        _stop_requested(worker, signal.SIGTERM)
        await asyncio.sleep(0.3)
        _stop_requested(worker, signal.SIGTERM)
        started = time.monotonic()
        for resp in aborted:
            with pytest.raises(aiohttp.ClientPayloadError):
                await asyncio.wait_for(resp.read(), 10)
        assert time.monotonic() - started < 5.0
        reader = redis.Redis.from_url(private_redis_url)
        codes = [redis_text(reader.hget(protocol.job_key(r.headers["history-item-id"]), "code")) for r in aborted]
        reader.close()
        assert codes == ["worker_stopping", "worker_stopping"]
    finally:
        worker.stop()


@pytest.mark.timeout(120)
async def test_a_killed_worker_s_streams_each_end_and_none_is_spoken_twice(aiohttp_client, private_redis_url, tmp_path):
    """A worker killed while it holds three started streams: each client learns of it (its response ends early, the
    record says worker_died) and no stream is run again by the worker that reaps it."""
    doomed = _sim_worker(private_redis_url, tmp_path, "doomed", 0.05).wait_ready()
    reaper: WorkerProcess | None = None
    try:
        client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path, jobs_chunk_timeout_s=20.0)))
        long_text = " ".join(["a long reading cut short"] * 60)
        responses = [await client.post(STREAM, json={"text": long_text}) for _ in range(3)]
        for resp in responses:
            assert resp.status == 200 and await resp.content.readany()
        await _until(lambda: len(_in_flight(private_redis_url, doomed)) == 3, 10, "three streams held by one worker")
        doomed.kill()
        reaper = _sim_worker(private_redis_url, tmp_path, "reaper", 0.05).wait_ready()
        for resp in responses:
            with pytest.raises(aiohttp.ClientPayloadError):
                await asyncio.wait_for(resp.read(), 30)
        reader = redis.Redis.from_url(private_redis_url)
        codes = [redis_text(reader.hget(protocol.job_key(r.headers["history-item-id"]), "code")) for r in responses]
        assert codes == ["worker_died"] * 3
        assert reader.llen(protocol.QUEUE) == 0 and not _in_flight(private_redis_url, reaper)
        reader.close()
    finally:
        doomed.kill()
        if reaper is not None:
            reaper.stop()


@pytest.mark.timeout(120)
async def test_a_worker_holds_at_most_its_streams_and_says_how_full_it_is(aiohttp_client, private_redis_url, tmp_path):
    """ZSYNTH_MAX_STREAMS bounds the in-flight list: more jobs wait in the queue for another worker (here the same one,
    later); the heartbeat, the worker's metrics and /readyz say how full it is; every request is heard whole."""
    worker = _sim_worker(private_redis_url, tmp_path, "bounded", 0.05, ZSYNTH_MAX_STREAMS="2").wait_ready()
    try:
        client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
        text = " ".join(["twenty words of speech"] * 5)
        peak = 0
        full_seen = False

        async def watch() -> None:
            nonlocal peak, full_seen
            reader = Redis.from_url(private_redis_url)
            try:
                while True:
                    peak = max(peak, await reader.llen(protocol.processing_key(worker.worker_id)))
                    beat = await reader.get(protocol.heartbeat_key(worker.worker_id))
                    if beat is not None:
                        status = json.loads(beat)
                        assert status["max_streams"] == 2
                        full_seen = full_seen or (status["full"] and status["streams"] == 2)
                    await asyncio.sleep(0.02)
            finally:
                await reader.aclose()

        watching = asyncio.create_task(watch())

        async def speak() -> float:
            resp = await client.post(STREAM, json={"text": text})
            assert resp.status == 200
            return _seconds(await resp.read())

        speaking = asyncio.gather(*(speak() for _ in range(5)))
        # The readiness probe, while the worker is full.
        deadline = time.monotonic() + 20
        ready: dict[str, Any] = {}
        while time.monotonic() < deadline and not ready.get("workers_full"):
            ready = await (await client.get("/readyz")).json()
            await asyncio.sleep(0.05)
        assert await speaking == [8.0] * 5
        watching.cancel()
        assert peak == 2, f"the in-flight list held {peak} jobs"
        assert full_seen, "the heartbeat never said the worker was full"
        assert ready.get("workers_full") == 1 and ready.get("streams") == 2, ready
        metrics = await asyncio.to_thread(_scrape, worker.metrics_url)
        assert "zsynth_worker_max_streams 2.0" in metrics and "zsynth_worker_streams " in metrics
    finally:
        worker.stop()


def _scrape(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as reply:
        return str(reply.read().decode())
