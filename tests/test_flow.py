"""Flow control from engine to client: bounded buffering per job, a write deadline, pacing at the worker, and output
bounds per request (issue 36: F2, F11 and the dead-front regression)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
import time

import aiohttp
import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.audio import assert_speech, decode_audio
from harness.base import LONG_TEXT, make_settings
from harness.fronts import front_process
from harness.stores import redis_text
from harness.workers import WorkerProcess
from workers.flow import CreditGate
from zsynth.core import protocol
from zsynth.services.dispatch import DISPATCHER
from zsynth.services.flow import Ledger, window_bytes
from zsynth.speech.app import create_app

# ----- the front's ledger (pure) --------------------------------------------------------------------------------


@pytest.mark.unit
def test_a_window_is_ten_seconds_of_audio_and_at_most_the_cap() -> None:
    assert window_bytes(96_000, 1 << 20, 10.0) == 960_000  # pcm_48000
    assert window_bytes(16_000, 1 << 20, 10.0) == 160_000  # mp3 at 128 kb/s
    assert window_bytes(200_000, 1 << 20, 10.0) == 1 << 20
    assert window_bytes(96_000, 0, 10.0) == 0  # off


@pytest.mark.unit
def test_jobs_past_the_budget_start_with_no_credit_and_get_it_back_as_others_end() -> None:
    ledger = Ledger(budget=1000)
    first, second, third = ledger.open(600), ledger.open(600), ledger.open(600)
    assert (first.granted, second.granted, third.granted) == (600, 400, 0)
    assert ledger.outstanding == 1000
    ledger.close(first)
    assert ledger.outstanding == 400
    # The third job's worker sent its one chunk (300 bytes) on no credit; taking it grants from the freed budget.
    assert ledger.take(third, 300, drained=True) == (300, 900)
    assert ledger.outstanding == 400 + 600


@pytest.mark.unit
def test_a_grant_goes_out_when_the_buffer_drains_or_half_a_window_was_taken() -> None:
    ledger = Ledger(budget=10_000)
    credit = ledger.open(1000)
    assert ledger.take(credit, 100, drained=False) is None  # more is buffered: the worker is not waiting on it
    assert ledger.take(credit, 400, drained=False) == (500, 1500)
    assert ledger.take(credit, 10, drained=True) == (510, 1510)
    assert ledger.take(credit, 0, drained=True) is None  # nothing new to say


@pytest.mark.stack
@settings(max_examples=200, deadline=None)
@given(
    budget=st.integers(1, 5000),
    steps=st.lists(st.tuples(st.sampled_from(["open", "take", "close"]), st.integers(0, 9), st.integers(1, 900))),
)
def test_the_ledger_never_grants_past_its_budget(budget: int, steps: list[tuple[str, int, int]]) -> None:
    """Whatever jobs open, take and end, the credit outstanding stays within the budget and matches the jobs'."""
    ledger = Ledger(budget)
    credits = []
    for action, index, size in steps:
        if action == "open":
            credits.append(ledger.open(size))
        elif credits and action == "take":
            ledger.take(credits[index % len(credits)], size, drained=bool(size % 2))
        elif credits:
            ledger.close(credits.pop(index % len(credits)))
        assert 0 <= ledger.outstanding <= budget
        assert ledger.outstanding == sum(c.outstanding for c in credits)
        assert all(c.granted - c.taken <= c.window for c in credits)


# ----- the worker's gate, on the real Redis ---------------------------------------------------------------------


def _gate(redis_url: str, window: int = 1000, wait_s: float = 5.0) -> tuple[CreditGate, threading.Event]:
    client = redis.Redis.from_url(redis_url)
    job = protocol.Job(text="x", voice_id="v", output_format="pcm_16000", window=window, granted_bytes=window)
    job.reply_to = protocol.reply_channel(protocol.new_job_id())
    abort = threading.Event()
    return CreditGate(client, job, wait_s, abort), abort


@pytest.mark.stack
def test_the_gate_waits_for_a_grant_and_always_lets_one_chunk_through_once_all_was_taken(redis_url) -> None:
    gate, _ = _gate(redis_url)
    listener = gate.redis.pubsub()
    listener.subscribe(gate.job.reply_to)  # the front is there
    try:
        assert gate.admit(800)
        gate.sent_chunk(800)
        assert not gate.allows(800)  # 1600 > 1000 granted, and not all of it was taken

        def grant() -> None:
            time.sleep(0.3)
            gate.redis.rpush(gate.key, "800 1800")

        threading.Thread(target=grant).start()
        started = time.monotonic()
        assert gate.admit(800)
        assert 0.2 < time.monotonic() - started < 3
        gate.sent_chunk(800)  # 1600 sent, 800 taken
        gate.redis.rpush(gate.key, "1600 1700")  # everything taken, little granted: one chunk of any size goes
        assert gate.admit(5000)
    finally:
        listener.close()
        gate.redis.delete(gate.key)


@pytest.mark.stack
def test_the_gate_stops_a_job_whose_front_is_gone_or_cancelled_it(redis_url) -> None:
    gate, _ = _gate(redis_url)
    gate.sent_chunk(1000)  # the window is used up and nobody listens on the reply channel
    started = time.monotonic()
    assert not gate.admit(10)
    assert "front is gone" in gate.stalled
    assert time.monotonic() - started < 5

    gate, abort = _gate(redis_url)
    gate.sent_chunk(1000)
    gate.redis.rpush(gate.key, protocol.CREDIT_CANCEL)
    assert not gate.admit(10) and abort.is_set() and not gate.stalled


@pytest.mark.stack
def test_the_gate_gives_up_when_a_live_front_grants_nothing_for_the_wait(redis_url) -> None:
    gate, _ = _gate(redis_url, wait_s=1.0)
    listener = gate.redis.pubsub()
    listener.subscribe(gate.job.reply_to)
    try:
        gate.sent_chunk(1000)
        assert not gate.admit(10)
        assert "took no audio for 1 s" in gate.stalled
    finally:
        listener.close()


# ----- end to end ------------------------------------------------------------------------------------------------

# About 2,500 characters of ordinary text: some 170 s of audio, 16 MB at pcm_48000. No break tags: the pause bound
# is not what holds these tests.
ORDINARY = LONG_TEXT + " And a few more words to round it off."


def _buffered(app) -> int:
    """Bytes of audio the front holds in its open jobs' buffers."""
    streams = app[DISPATCHER]._streams.values()
    return sum(len(event.audio) for stream in streams for event in list(stream.queue._queue))


async def _request_without_reading(port: int, path: str, body: bytes) -> socket.socket:
    """Send a POST on a socket whose receive buffer is small, and never read from it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    await asyncio.get_running_loop().sock_sendall(sock, head + body)
    return sock


@pytest.mark.stack
@pytest.mark.timeout(300)
async def test_a_client_that_reads_nothing_holds_one_window_and_is_cut_at_the_write_deadline(
    aiohttp_client, redis_url, data_dir, shared_workers
):
    """F2, with ordinary text: the front buffers at most a window per job, then cuts the client and frees the worker."""
    settings_ = make_settings(redis_url, data_dir, flow_write_timeout_s=1.5)
    client = await aiohttp_client(create_app(settings_))
    app = client.server.app
    window = window_bytes(96_000, settings_.flow.window_bytes, settings_.flow.window_seconds)
    body = aiohttp.JsonPayload({"text": ORDINARY})._value
    socks = [
        await _request_without_reading(client.server.port, "/v1/text-to-speech/v/stream?output_format=pcm_48000", body)
        for _ in range(2)
    ]
    try:
        peak, started = 0, time.monotonic()
        # The kernel's socket buffers (some MB on loopback) fill first, at the engine's pace: generous on a busy box.
        while time.monotonic() - started < 150:
            peak = max(peak, _buffered(app))
            if time.monotonic() - started > 2 and not app[DISPATCHER]._streams:
                break
            await asyncio.sleep(0.05)
        ended_after = time.monotonic() - started
        assert not app[DISPATCHER]._streams, "the unread streams were never cut"
        # Two jobs, each at most its window plus one chunk (a sentence at 48 kHz is well under 1 MB).
        assert peak <= 2 * (window + 1_000_000), f"the front held {peak} bytes for two unread streams"
        assert ended_after < 150
    finally:
        for sock in socks:
            sock.close()
    # The workers are free again: a sentence is spoken at once.
    resp = await client.post("/v1/text-to-speech/v?output_format=pcm_16000", json={"text": "The slot is free again."})
    assert resp.status == 200
    assert_speech(*decode_audio(await resp.read(), "pcm_16000"), "The slot is free again.")


@pytest.mark.stack
async def test_a_slow_reader_still_gets_every_byte_across_many_windows(
    aiohttp_client, redis_url, data_dir, shared_workers
):
    """Pacing loses nothing: a client that reads in small sips hears the whole text, window after window."""
    text = " ".join(LONG_TEXT.split(". ")[:8]) + "."
    client = await aiohttp_client(create_app(make_settings(redis_url, data_dir, flow_window_bytes=200_000)))
    resp = await client.post("/v1/text-to-speech/v/stream?output_format=pcm_48000", json={"text": text})
    assert resp.status == 200
    audio = bytearray()
    while chunk := await resp.content.read(32768):
        audio += chunk
        await asyncio.sleep(0.01)
    duration = assert_speech(*decode_audio(bytes(audio), "pcm_48000"), text)
    assert len(audio) > 5 * 200_000, f"only {duration:.1f} s of audio: too short to need several windows"


@pytest.mark.heavy
async def test_a_worker_stops_soon_after_its_front_is_killed_mid_stream(private_redis_url, tmp_path):
    """The regression: a SIGKILLed front's job used to run on for 20-25 s; its worker now stops within seconds."""
    worker = WorkerProcess(private_redis_url, "orphaned", tmp_path).wait_ready()
    try:
        with front_process(private_redis_url, tmp_path) as (front, base):
            async with aiohttp.ClientSession() as session:
                resp = await session.post(
                    f"{base}/v1/text-to-speech/v/stream?output_format=pcm_48000", json={"text": ORDINARY * 3}
                )
                assert resp.status == 200
                job_id = resp.headers["history-item-id"]
                await resp.content.read(1000)
                front.send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
                front.wait(10)
        reader = redis.Redis.from_url(private_redis_url)
        record: dict[str, str] = {}
        while time.monotonic() - killed_at < 40:
            record = {redis_text(k): redis_text(v) for k, v in reader.hgetall(protocol.job_key(job_id)).items()}
            if "state" in record:
                break
            time.sleep(0.1)
        stopped_after = time.monotonic() - killed_at
        reader.close()
        assert record.get("state") == "error", record
        assert record.get("code") == protocol.ErrorCode.CLIENT_TOO_SLOW
        assert stopped_after < 15, f"the worker went on for {stopped_after:.1f} s for a dead front"
    finally:
        worker.stop()


# ----- output bounds per request -----------------------------------------------------------------------------------


@pytest.mark.stack
async def test_break_tags_past_the_pause_bound_are_refused_before_any_job(client):
    """F2's request: pages of 3 s breaks are a 400 naming the bound, not minutes of silence."""
    text = "Wait. " + '<break time="3s"/> ' * 40 + "Done."
    resp = await client.post("/v1/text-to-speech/v/stream?output_format=pcm_48000", json={"text": text})
    assert resp.status == 400
    detail = (await resp.json())["detail"]
    assert detail["code"] == "pause_limit_exceeded" and "120 s" in detail["message"]
    ok = await client.post(
        "/v1/text-to-speech/v?output_format=pcm_16000", json={"text": 'Wait. <break time="3s"/> Done.'}
    )
    assert ok.status == 200
    samples, rate = decode_audio(await ok.read(), "pcm_16000")
    assert len(samples) / rate > 3.0


@pytest.mark.stack
async def test_ten_thousand_digits_read_one_by_one_are_refused_at_once(client):
    """F11: normalization makes 10,000 digits about an hour of audio; the request is refused before any job."""
    started = time.monotonic()
    resp = await client.post(
        "/v1/text-to-speech/v?output_format=mp3_44100_128",
        json={"text": "7" * 10_000, "apply_text_normalization": "on"},
    )
    assert resp.status == 400
    assert (await resp.json())["detail"]["code"] == "audio_limit_exceeded"
    assert time.monotonic() - started < 10


@pytest.mark.stack
@pytest.mark.parametrize("route", ["stream-input", "multi-stream-input"])
async def test_a_socket_segment_past_the_pause_bound_gets_an_error_frame(client, route):
    async with client.ws_connect(f"/v1/text-to-speech/v/{route}?output_format=pcm_16000") as ws:
        await ws.send_json({"text": " "})
        await ws.send_json({"text": "Hold on " + '<break time="3s"/> ' * 30 + "now.", "flush": True})
        frames = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(20):
                async for message in ws:
                    if message.type != aiohttp.WSMsgType.TEXT:
                        break
                    frames.append(message.json())
                    if "error" in frames[-1]:
                        break
        errors = [frame for frame in frames if "error" in frame]
        assert errors and errors[0]["error"] == "pause_limit_exceeded", frames
        assert not any(frame.get("audio") for frame in frames)


@pytest.mark.stack
@pytest.mark.timeout(400)
async def test_normal_streams_come_whole_beside_clients_that_do_not_read_and_pause_heavy_requests(
    aiohttp_client, redis_url, data_dir, shared_workers
):
    """The mixed load: unread streams of long text, pause-heavy whole answers and normal streams at once; every normal
    stream arrives whole (none cut, none past its deadlines), and the unread ones are cut without taking the front's
    memory."""
    # Unread streams hold a worker each until they are cut (their window taken, then the write deadline): the other
    # requests may wait that long for a worker on a busy box, within deadlines long enough for it.
    settings_ = make_settings(
        redis_url,
        data_dir,
        flow_write_timeout_s=4.0,
        flow_front_audio_budget=4 * 1024 * 1024,
        jobs_first_chunk_timeout_s=120.0,
        jobs_chunk_timeout_s=60.0,
    )
    client = await aiohttp_client(create_app(settings_))
    app = client.server.app
    body = aiohttp.JsonPayload({"text": ORDINARY})._value
    unread = [
        await _request_without_reading(client.server.port, "/v1/text-to-speech/v/stream?output_format=pcm_48000", body)
        for _ in range(3)
    ]
    paused = 'Hold on. <break time="3s"/> ' * 10 + "Here it is."
    normal = "A normal request, spoken while other clients misbehave."
    peak = 0
    watching = True

    async def watch() -> None:
        nonlocal peak
        while watching:
            peak = max(peak, _buffered(app))
            await asyncio.sleep(0.05)

    async def pause_heavy() -> int:
        resp = await client.post("/v1/text-to-speech/v/with-timestamps?output_format=pcm_48000", json={"text": paused})
        await resp.read()
        return resp.status

    async def normal_stream() -> float:
        resp = await client.post("/v1/text-to-speech/v/stream?output_format=mp3_44100_128", json={"text": normal})
        assert resp.status == 200
        samples, rate = decode_audio(await resp.read(), "mp3_44100_128")
        return assert_speech(samples, rate, normal)

    watcher = asyncio.create_task(watch())
    try:
        results = await asyncio.gather(*(pause_heavy() for _ in range(2)), *(normal_stream() for _ in range(3)))
    finally:
        watching = False
        await watcher
        for sock in unread:
            sock.close()
    assert results[:2] == [200, 200]
    assert all(duration > 1.5 for duration in results[2:])
    # The budget bounds every job's credit together; the whole answers take their chunks as they come.
    assert peak <= settings_.flow.front_audio_budget + 3 * 1_000_000, f"the front buffered {peak} bytes"
