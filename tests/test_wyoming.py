"""The Wyoming listener as Home Assistant uses it: the real ``wyoming`` library's AsyncTcpClient against a real front
(ZSYNTH_WYOMING_URI) and the shared Piper workers; bad frames on a raw socket; a client that leaves mid-answer on a
private worker; and a clean ``wyoming-bench`` run."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from redis.asyncio import Redis
from wyoming.audio import AudioChunk, AudioStart
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeVoice,
)

from harness.audio import assert_speech
from harness.base import LONG_TEXT, ROOT, free_port, make_settings
from harness.stores import redis_text
from harness.wyoming_client import error_then_close as _error_then_close
from harness.wyoming_client import raw_connection as _raw
from harness.wyoming_client import wyoming_front as _front
from zsynth.core import protocol
from zsynth.core.config import Settings, SettingsError
from zsynth.speech.wyoming.events import MAX_HEADER_BYTES
from zsynth.speech.wyoming.listener import SERVICE_TYPE, service_info
from zsynth.speech.wyoming.text import SentenceStream

PLAIN = "Turning on the kitchen lights. The living room stays as it is. Good night."
STREAMED = "The weather today is sunny with a light breeze. Tomorrow brings rain in the afternoon."
READ_TIMEOUT = 60.0


@pytest.fixture
async def port(aiohttp_client, redis_url, data_dir, shared_workers) -> int:
    """A front on the shared workers with its listener on a free loopback port."""
    return await _front(aiohttp_client, make_settings(redis_url, data_dir, wyoming_uri=("127.0.0.1", free_port())))


def _client(port: int) -> AsyncTcpClient:
    return AsyncTcpClient("127.0.0.1", port, connect_timeout=5.0, read_timeout=READ_TIMEOUT)


async def _read_until(client: AsyncTcpClient, end: str) -> list[Event]:
    """Events up to and including the first of type ``end`` (an error or a close fails the test)."""
    events: list[Event] = []
    while True:
        event = await client.read_event()
        assert event is not None, f"connection closed before {end}: {[e.type for e in events]}"
        assert not Error.is_type(event.type), Error.from_event(event)
        events.append(event)
        if event.type == end:
            return events


def _audio(events: list[Event]) -> tuple[np.ndarray, int]:
    """The answer's audio as float samples and its rate; every chunk in the format of the first audio-start."""
    start = AudioStart.from_event(next(e for e in events if AudioStart.is_type(e.type)))
    assert (start.width, start.channels) == (2, 1)
    pcm = b""
    for event in events:
        if AudioChunk.is_type(event.type):
            chunk = AudioChunk.from_event(event)
            assert (chunk.rate, chunk.width, chunk.channels) == (start.rate, 2, 1)
            pcm += chunk.audio
        elif AudioStart.is_type(event.type):
            assert AudioStart.from_event(event).rate == start.rate, "one format for the whole answer"
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0, start.rate


async def _nothing_more(client: AsyncTcpClient, wait_s: float = 1.5) -> None:
    """No further event arrives within ``wait_s`` (the answer really ended)."""
    client.read_timeout = wait_s
    with pytest.raises(asyncio.TimeoutError):
        event = await client.read_event()
        print("unexpected", event)


# ----- the contract ------------------------------------------------------------------------------------------------


@pytest.mark.stack
async def test_describe_lists_one_streaming_program_with_the_builtin_voice(port):
    async with _client(port) as client:
        await client.write_event(Describe().event())
        event = await client.read_event()
    assert event is not None and Info.is_type(event.type)
    info = Info.from_event(event)  # the library's own parser: every required field is there
    assert [p.name for p in info.tts] == ["zsynth"]
    program = info.tts[0]
    assert program.installed and program.supports_synthesize_streaming and program.version
    joe = next(v for v in program.voices if v.name == "joe")
    assert joe.installed and joe.languages == ["en"] and joe.description == "Joe"


@pytest.mark.stack
async def test_plain_synthesize_is_one_audio_cycle_of_speech(port):
    async with _client(port) as client:
        await client.write_event(Synthesize(PLAIN).event())
        events = await _read_until(client, "audio-stop")
        await _nothing_more(client)
    kinds = [e.type for e in events]
    assert kinds[0] == "audio-start" and kinds.count("audio-start") == 1 and kinds.count("audio-stop") == 1
    assert set(kinds[1:-1]) == {"audio-chunk"}
    samples, rate = _audio(events)
    assert rate == 22050
    assert_speech(samples, rate, PLAIN)


@pytest.mark.stack
async def test_streaming_mid_word_pieces_with_the_legacy_synthesize(port):
    # Pieces as an LLM streams them: cut inside words and sentences, spaces leading the next piece.
    pieces = [
        "The weat",
        "her today is sun",
        "ny with a li",
        "ght breeze. Tomor",
        "row brings rain in the after",
        "noon.",
    ]
    assert "".join(pieces) == STREAMED
    async with _client(port) as client:
        await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="joe")).event())
        for piece in pieces:
            await client.write_event(SynthesizeChunk(piece).event())
        # Home Assistant repeats the whole text as a legacy synthesize before it stops the stream: ignored.
        await client.write_event(Synthesize(STREAMED, voice=SynthesizeVoice(name="joe")).event())
        await client.write_event(SynthesizeStop().event())
        events = await _read_until(client, "synthesize-stopped")
        await _nothing_more(client)
    kinds = [e.type for e in events]
    assert kinds.count("audio-start") == 2 and kinds.count("audio-stop") == 2, "one audio cycle per sentence"
    samples, rate = _audio(events)
    duration = assert_speech(samples, rate, STREAMED)
    assert duration < 9.0, f"{duration:.1f}s: the legacy synthesize was spoken as well"


@pytest.mark.stack
async def test_named_and_unknown_voices_are_spoken(port):
    for voice in ("joe", "a-voice-this-box-lacks"):
        async with _client(port) as client:
            await client.write_event(Synthesize("Hello from Home Assistant.", voice=SynthesizeVoice(voice)).event())
            events = await _read_until(client, "audio-stop")
        samples, rate = _audio(events)
        assert_speech(samples, rate, "Hello from Home Assistant.")


@pytest.mark.stack
async def test_empty_text_is_an_empty_audio_cycle(port):
    async with _client(port) as client:
        await client.write_event(Synthesize("   ").event())
        events = await _read_until(client, "audio-stop")
    assert [e.type for e in events] == ["audio-start", "audio-stop"]


# ----- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.stack
@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (b"{not json\n", "invalid_json"),
        (b"[1, 2]\n", "invalid_json"),
        (b'{"data": {}}\n', "invalid_event"),
        (b'{"type": "synthesize", "data_length": "many"}\n', "invalid_event"),
        (b'{"type": "synthesize", "data_length": 2000000}\n', "event_too_large"),
        (b'{"type": "synthesize", "payload_length": 1000000}\n', "event_too_large"),
        (b'{"type": "synthesize", "data_length": 4}\n"ab"', "invalid_json"),
        (b"\xff\xfe\n", "invalid_json"),
    ],
)
async def test_broken_frames_get_an_error_and_a_close(port, frame, code):
    reader, writer = await _raw(port)
    writer.write(frame)
    data = await _error_then_close(reader)
    assert data["code"] == code and data["text"]
    writer.close()


@pytest.mark.stack
async def test_an_endless_header_line_is_cut_at_its_bound(port):
    reader, writer = await _raw(port)
    writer.write(b'{"type": "synthesize", "data": {"text": "' + b"a" * (MAX_HEADER_BYTES + 10))
    data = await _error_then_close(reader)
    assert data["code"] == "event_too_large"
    writer.close()


@pytest.mark.stack
@pytest.mark.parametrize(
    ("events", "code"),
    [
        ([Event("synthesize", {"text": 5})], "invalid_event"),
        ([Event("synthesize", {"voice": {"name": "joe"}})], "invalid_event"),
        ([Event("synthesize", {"text": "Hi.", "voice": "joe"})], "invalid_event"),
        ([Event("synthesize-chunk", {"text": "Hi."})], "no_stream"),
        ([Event("synthesize-stop")], "no_stream"),
        ([SynthesizeStart().event(), SynthesizeStart().event()], "stream_already_started"),
        ([Event("synthesize", {"text": "x" * 10_001})], "max_character_limit_exceeded"),
    ],
)
async def test_wrong_events_get_an_error_and_the_connection_goes_on(port, events, code):
    async with _client(port) as client:
        for event in events:
            await client.write_event(event)
        error = await client.read_event()
        assert error is not None and Error.is_type(error.type)
        assert Error.from_event(error).code == code
        await client.write_event(Describe().event())
        info = await client.read_event()
        assert info is not None and Info.is_type(info.type)


@pytest.mark.stack
async def test_a_stream_past_the_text_bound_errors_and_still_stops(port):
    async with _client(port) as client:
        await client.write_event(SynthesizeStart().event())
        for _ in range(11):
            await client.write_event(SynthesizeChunk("word " * 200).event())  # 1,000 characters each
        await client.write_event(SynthesizeStop().event())
        kinds = []
        while True:
            event = await client.read_event()
            assert event is not None
            kinds.append(event.type)
            if event.type == "error":
                assert Error.from_event(event).code == "max_character_limit_exceeded"
            if event.type == "synthesize-stopped":
                break
    assert kinds.count("error") == 1


@pytest.mark.stack
async def test_unknown_events_are_dropped(port):
    async with _client(port) as client:
        await client.write_event(Event("select-program", {"name": "zsynth"}))
        await client.write_event(Event("something-new", {"x": 1}))
        await client.write_event(Synthesize("Still here.").event())
        events = await _read_until(client, "audio-stop")
    samples, rate = _audio(events)
    assert_speech(samples, rate, "Still here.")


# ----- access ------------------------------------------------------------------------------------------------------


@pytest.mark.stack
async def test_idle_connection_is_closed(aiohttp_client, redis_url, data_dir, shared_workers):
    settings = make_settings(redis_url, data_dir, wyoming_uri=("127.0.0.1", free_port()), wyoming_idle_timeout_s=0.5)
    reader, writer = await _raw(await _front(aiohttp_client, settings))
    started = time.monotonic()
    assert await asyncio.wait_for(reader.read(), 10) == b""
    assert time.monotonic() - started < 5.0
    writer.close()


@pytest.mark.stack
async def test_connections_per_address_are_capped(aiohttp_client, redis_url, data_dir, shared_workers):
    settings = make_settings(
        redis_url, data_dir, wyoming_uri=("127.0.0.1", free_port()), wyoming_max_connections_per_address=2
    )
    listener = await _front(aiohttp_client, settings)
    held = [await _raw(listener) for _ in range(2)]
    await asyncio.sleep(0.2)
    reader, writer = await _raw(listener)
    data = await _error_then_close(reader)
    assert data["code"] == "too_many_connections"
    for _, held_writer in held:
        held_writer.close()
    writer.close()


@pytest.mark.stack
async def test_addresses_outside_the_allow_list_are_closed_at_once(aiohttp_client, redis_url, data_dir):
    settings = Settings.from_env(
        {"ZSYNTH_WYOMING_URI": f"tcp://127.0.0.1:{free_port()}", "ZSYNTH_WYOMING_ALLOW": "10.0.0.0/8, 192.168.1.0/24"},
        redis_url=redis_url,
        data_dir=data_dir,
    )
    reader, writer = await _raw(await _front(aiohttp_client, settings))
    writer.write(b'{"type": "describe"}\n')
    try:
        assert await asyncio.wait_for(reader.read(), 10) == b"", "nothing is answered to a refused address"
    except ConnectionResetError:
        pass  # closed at once: the client's describe met a reset
    writer.close()


@pytest.mark.unit
def test_settings_parse_the_listener_address():
    assert Settings.from_env({}).wyoming.uri is None
    assert Settings.from_env({"ZSYNTH_WYOMING_URI": "tcp://0.0.0.0:10200"}).wyoming.uri == ("0.0.0.0", 10200)
    assert Settings.from_env({"ZSYNTH_WYOMING_URI": "tcp://[::1]:10300"}).wyoming.uri == ("::1", 10300)
    for bad in ("10200", "unix:///tmp/x", "tcp://host", "tcp://:1", "tcp://h:70000", "stdio://"):
        with pytest.raises(SettingsError, match="ZSYNTH_WYOMING_URI"):
            Settings.from_env({"ZSYNTH_WYOMING_URI": bad})


@pytest.mark.stack
def test_zeroconf_record_names_the_service_without_sending_anything():
    info = service_info("kitchen-zsynth", "192.0.2.10", 10200)
    assert info.type == SERVICE_TYPE == "_wyoming._tcp.local."
    assert info.name == "kitchen-zsynth._wyoming._tcp.local."
    assert info.port == 10200 and info.parsed_addresses() == ["192.0.2.10"]


@pytest.mark.unit
def test_sentences_come_out_as_they_complete():
    stream = SentenceStream()
    out = [s for piece in ["Hel", "lo the", "re. How a", "re you? Dr. Smi", "th costs 3.", "14 now. Bye"] for s in
           stream.feed(piece)]  # fmt: skip
    assert out == ["Hello there.", "How are you?", "Dr. Smith costs 3.14 now."]
    assert stream.finish() == ["Bye"]
    long_first = SentenceStream().feed("This first sentence runs on and on, " * 5)
    assert long_first and long_first[0].endswith(",") and len(long_first[0]) <= 180


# ----- a client that leaves ----------------------------------------------------------------------------------------


@pytest.mark.heavy
@pytest.mark.timeout(300)
async def test_client_gone_mid_answer_cancels_its_job_and_frees_the_slot(
    aiohttp_client, private_redis_url, private_worker, tmp_path
):
    settings = make_settings(private_redis_url, tmp_path, wyoming_uri=("127.0.0.1", free_port()))
    listener = await _front(aiohttp_client, settings)
    async with _client(listener) as client:
        await client.write_event(Synthesize(LONG_TEXT).event())
        while (event := await client.read_event()) is not None and not AudioChunk.is_type(event.type):
            pass
    started = time.monotonic()  # gone after its first audio, with ~30 sentences still to speak
    async with _client(listener) as client:
        await client.write_event(Synthesize("A short request right after.").event())
        events = await _read_until(client, "audio-stop")
    samples, rate = _audio(events)
    assert_speech(samples, rate, "A short request right after.")
    assert time.monotonic() - started < 10.0, "the only worker was still speaking the abandoned answer"
    redis = Redis.from_url(private_redis_url)
    try:
        codes = []
        async for key in redis.scan_iter(protocol.job_key("*")):
            codes.append(redis_text(await redis.hget(key, "code") or b""))
    finally:
        await redis.aclose()
    assert "cancelled" in codes


# ----- wyoming-bench -----------------------------------------------------------------------------------------------


@pytest.mark.heavy
@pytest.mark.timeout(600)
async def test_wyoming_bench_runs_clean(port):
    bench = Path(sys.executable).with_name("wyoming-bench")
    proc = await asyncio.create_subprocess_exec(
        str(bench),
        "tts",
        f"127.0.0.1:{port}",
        "--mode",
        "both",
        "--rounds",
        "1",
        "--warmup",
        "0",
        "--timeout",
        "60",
        "--texts",
        "Turning on the kitchen lights.",
        "The weather is mild today. Expect rain tomorrow afternoon.",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(proc.communicate(), 300)
    text = output.decode()
    assert proc.returncode == 0, text
    # Both paths measured, every measurement clean (any error event or cut answer is a failure).
    assert "[non_streaming] ok=2 fail=0" in text and "[streaming] ok=2 fail=0" in text, text


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_side_by_side_with_wyoming_piper(tmp_path):
    """``python -m harness.bench wyoming``, reduced: both servers answer every row, wyoming-bench runs clean over
    both, and both speak the paragraph in the same voice (about the same length of audio)."""
    figures = tmp_path / "figures.json"
    command = [sys.executable, "-m", "harness.bench", "wyoming", "--reduced", "--repeats", "1", "--json", str(figures)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = {}
    figures_table = result.stdout.split("| zsynth vs wyoming-piper |")[0]  # the ratios' table reuses row names
    for row in figures_table.splitlines():
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if row.startswith("| ") and len(cells) == 3:
            rows[cells[0]] = cells[1:]
    assert rows[""][0] == "wyoming-piper 2.5.2" and rows[""][1].startswith("zsynth, default (")
    for label in ("short command, plain, first audio p50", "paragraph, streaming, whole answer p50"):
        assert all(re.fullmatch(r"[1-9]\d* ms", cell) for cell in rows[label]), rows[label]
    assert all(float(cell) > 0 for cell in rows["4 clients: paragraphs per second"])
    assert re.search(r"\| 4 clients at once: texts per second \| ≥ 1\.3× \| \d+\.\d\d× \|", result.stdout)
    assert (
        result.stdout.count("[non_streaming] ok=1 fail=0") == 2 and result.stdout.count("[streaming] ok=1 fail=0") == 2
    )
    piper, zsynth = (column["paragraph audio s"] for column in json.loads(figures.read_text())["columns"])
    assert 10 < piper < 40 and 0.8 < zsynth / piper < 1.25
