"""CPU proofs of the stream scheduler (issue 47, item 6): how many conversing voice agents one worker carries.

Real redis-server, one real worker on the simulated engine (load tests only: it holds the slot ``RTF * 0.5`` s per
0.5 s chunk of real PCM), a real front process, and the capacity driver (``harness.bench.gpu_capacity.converse``): each
agent holds a ``multi-stream-input`` socket and speaks turns of one or two sentences as LiveKit's plugin does (a new
context per turn, sent, flushed and closed), plays each turn from its first chunk behind a 150 ms jitter buffer, and
its user then speaks for 3-6 s. A turn *runs dry* when a chunk arrives after the playback reached it.

The targets are the issue's: first audio p95 at most 300 ms and no turn running dry, 24 agents at the GPU engine's
target RTF (0.04) and 16 at today's H100 figure (0.072). Bounded: three turns per agent (72 and 48 turns), about a
minute a level; only 127.0.0.1. The figures each run measured are printed (``-s`` shows them).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from harness.fronts import front_process
from harness.workers import WorkerProcess

# alone: the bounds are measured on wall time, the agents' at the issue's target (./scripts/test runs these after its
# parallel pass; key B's share of two Piper workers beside key A's streams is a wall-clock figure too).
pytestmark = [pytest.mark.heavy, pytest.mark.alone]

CHUNK_AUDIO_S = 0.5
TURNS = 3


def _level(url: str, data: Path, rtf: float, agents: int) -> object:
    from harness.bench.gpu_capacity import FIRST_AUDIO_P95_S, converse

    env = {
        "ZSYNTH_ENGINE": "simulated",
        "ZSYNTH_LOAD_TEST_ONLY": "1",
        "ZSYNTH_SIM_CHUNK_AUDIO": str(CHUNK_AUDIO_S),
        "ZSYNTH_SIM_CHUNK_HOLD": str(rtf * CHUNK_AUDIO_S),
        "ZSYNTH_LOG_LEVEL": "WARNING",
    }
    worker = WorkerProcess(url, f"proof-{agents}-{time.monotonic_ns()}", data, **env).wait_ready()
    try:
        with front_process(url, data, ZSYNTH_LOG_LEVEL="WARNING") as (_, base):
            result = asyncio.run(converse(base, agents, TURNS, seed=47, metrics_url=worker.metrics_url))
    finally:
        worker.stop()
    print(
        f"\n{agents} agents at RTF {rtf}: {result.turns} turns, first audio p50 {1000 * result.first_audio_p50_s:.0f}"
        f" ms, p95 {1000 * result.first_audio_p95_s:.0f} ms, max {1000 * result.first_audio_max_s:.0f} ms, dry turns"
        f" {result.dry_turns}, slot computing {result.slot_engine_share:.0%}, held {result.slot_held_share:.0%}"
    )
    assert result.errors == (), result.errors
    assert result.turns == agents * TURNS
    assert result.dry_turns == 0, f"{result.dry_turns} turns ran dry: {result.underruns}"
    assert result.first_audio_p95_s <= FIRST_AUDIO_P95_S, f"first audio p95 {result.first_audio_p95_s:.3f} s"
    return result


@pytest.mark.timeout(300)
def test_one_worker_at_rtf_0_04_carries_24_conversing_agents(private_redis_url, tmp_path):
    _level(private_redis_url, tmp_path, 0.04, 24)


@pytest.mark.timeout(300)
def test_one_worker_at_rtf_0_072_carries_16_conversing_agents(private_redis_url, tmp_path):
    _level(private_redis_url, tmp_path, 0.072, 16)


KEY_A, KEY_B = "proof-key-a", "proof-key-b"
SENTENCE = "Key B asks for one short sentence."
READING = " ".join(
    f"Paragraph {n} of key A's long reading goes on at an even pace, and its client takes the audio very slowly."
    for n in range(40)
)[:4000]


async def _answer_s(session: object, base: str) -> float:
    """Seconds to key B's whole answer for SENTENCE (checked as speech)."""
    from harness.audio import assert_speech, decode_audio

    started = time.monotonic()
    async with session.post(  # type: ignore[attr-defined]
        f"{base}/v1/text-to-speech/v?output_format=pcm_16000", json={"text": SENTENCE}, headers={"xi-api-key": KEY_B}
    ) as resp:
        assert resp.status == 200, await resp.text()
        body = await resp.read()
    elapsed = time.monotonic() - started
    assert_speech(*decode_audio(body, "pcm_16000"), SENTENCE)
    return elapsed


async def _slow_reader(session: object, base: str, stop: asyncio.Event, started: asyncio.Event) -> int:
    """Key A's stream of READING at pcm_44100, read at 1 KB/s until told to stop; the bytes it read."""
    url = f"{base}/v1/text-to-speech/v/stream?output_format=pcm_44100"
    read = 0
    async with session.post(url, json={"text": READING}, headers={"xi-api-key": KEY_A}) as resp:  # type: ignore[attr-defined]
        assert resp.status == 200, await resp.text()
        while not stop.is_set():
            data = await resp.content.read(1024)
            if not data:
                break
            read += len(data)
            started.set()
            await asyncio.sleep(1.0)
    return read


async def _engines_idle(metrics_urls: list[str], quiet_s: float, timeout_s: float) -> None:
    """Wait until no worker's engine has computed for ``quiet_s`` (longer than one sentence: the engine seconds are
    counted when a chunk is made), at most
    ``timeout_s`` (a busy box: the probe then goes ahead anyway)."""
    from harness.measure import sample_sum, scrape

    def engine_s() -> float:
        return sum(sample_sum(scrape(url), "zsynth_worker_engine_seconds_sum") for url in metrics_urls)

    deadline = time.monotonic() + timeout_s
    last, since = await asyncio.to_thread(engine_s), time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        now_s = await asyncio.to_thread(engine_s)
        if now_s != last:
            last, since = now_s, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return


async def _first(events: list[asyncio.Event], count: int) -> None:
    """Wait until ``count`` of ``events`` are set."""
    while sum(1 for event in events if event.is_set()) < count:
        await asyncio.sleep(0.05)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("readers", [2, 8])
def test_key_a_s_slow_readers_do_not_hold_key_b_s_sentence_on_piper(private_redis_url, tmp_path, readers):
    """The live probe of the issue on the default box (two Piper workers, one engine thread each): key A keeps 2, then
    8 streams of 4,000 characters open and reads each at 1 KB/s (``POST .../stream``, ``pcm_44100``). Key B's one
    sentence is still answered within 2 s plus its synthesis alone (measured first, on the same stack); before the
    slot was shared, it waited for a worker that a client that does not read held (5.6 s with 2 such streams, 8.7 s
    with 8)."""
    import aiohttp

    # The slow readers stay open for the whole probe, as readers just fast enough never to trip the write deadline
    # would: the front's write deadline and the workers' flow wait are a minute here (10 s and 12 s by default, which
    # cut a 1 KB/s reader of pcm_44100 within seconds of its window filling, and free what it held).
    workers = [
        WorkerProcess(private_redis_url, f"proof-piper-{n}-{time.monotonic_ns()}", tmp_path, ZSYNTH_FLOW_WAIT="70")
        for n in range(2)
    ]
    try:
        for worker in workers:
            worker.wait_ready()
        env = {"ZSYNTH_API_KEYS": f"{KEY_A},{KEY_B}", "ZSYNTH_LOG_LEVEL": "WARNING", "ZSYNTH_WRITE_TIMEOUT": "60"}
        with front_process(private_redis_url, tmp_path, **env) as (_, base):

            async def probe() -> tuple[list[float], list[float], list[int]]:
                async with aiohttp.ClientSession() as session:
                    idle = [await _answer_s(session, base) for _ in range(3)]
                    stop = asyncio.Event()
                    reading = [asyncio.Event() for _ in range(readers)]
                    tasks = [asyncio.create_task(_slow_reader(session, base, stop, r)) for r in reading]
                    # Every worker is inside key A's streams (the others wait for a worker to take them), until the
                    # streams it runs are a window ahead of their readers: its engine stops (the probe).
                    await asyncio.wait_for(_first(reading, 2), 60)
                    await _engines_idle([w.metrics_url for w in workers], 5.0, 120.0)
                    loaded = []
                    for _ in range(3):
                        await asyncio.sleep(1.0)
                        loaded.append(await _answer_s(session, base))
                    stop.set()
                    read = await asyncio.gather(*tasks, return_exceptions=True)
                    return idle, loaded, [r if isinstance(r, int) else -1 for r in read]

            idle, loaded, read = asyncio.run(probe())
    finally:
        for worker in workers:
            worker.stop()
    alone = sorted(idle)[1]
    print(
        f"\nkey B alone {[round(s, 3) for s in idle]} s;"
        f" beside key A's {readers} slow readers {[round(s, 3) for s in loaded]} s"
    )
    assert max(loaded) <= 2.0 + alone, f"key B's sentence took {max(loaded):.2f} s beside the slow readers"
    assert all(n > 0 for n in read), read  # every slow reader was served
