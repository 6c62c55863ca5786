"""The load-test tools: the simulated engine (never by accident) and the load generator against a small stack."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

from harness.base import ROOT
from harness.fronts import front_process
from harness.workers import WorkerProcess
from workers.engines import load_engine
from workers.engines.base import VoiceSpec
from zsynth.core.config import Settings

pytestmark = pytest.mark.heavy


def test_simulated_engine_needs_the_explicit_switch(tmp_path):
    with pytest.raises(ValueError, match="ZSYNTH_LOAD_TEST_ONLY"):
        load_engine(Settings(engine="simulated", data_dir=tmp_path))


def test_simulated_engine_emits_real_pcm_for_the_text(tmp_path):
    engine = load_engine(
        Settings(engine="simulated", data_dir=tmp_path).with_(
            sim_load_test_only=True, sim_chunk_hold_s=0.01, sim_chunk_audio_s=0.5
        )
    )
    chunks = list(engine.synthesize("one two three four five six seven", VoiceSpec("x"), {}, lambda: False))
    pcm = np.concatenate([c.pcm for c in chunks])
    # Seven words at 2.5 words a second are 2.8 s: six half-second chunks of sound that is not silence.
    assert len(chunks) == 6 and len(pcm) == 6 * engine.sample_rate // 2
    assert float(np.sqrt((pcm**2).mean())) > 0.01
    # Each chunk speaks its share of the words, in order.
    assert " ".join(c.text for c in chunks if c.text) == "one two three four five six seven"


@pytest.mark.parametrize("mode", ["http", "ws", "ws-connect"])
def test_load_generator_against_a_small_simulated_stack(private_redis_url, tmp_path, mode):
    env = {"ZSYNTH_ENGINE": "simulated", "ZSYNTH_LOAD_TEST_ONLY": "1", "ZSYNTH_SIM_CHUNK_HOLD": "0.02"}
    workers = [WorkerProcess(private_redis_url, f"sim-{mode}-{i}", tmp_path, **env).wait_ready() for i in range(2)]
    try:
        with front_process(private_redis_url, tmp_path) as (front, base):
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "harness.bench",
                    "loadgen",
                    "--base",
                    base,
                    "--mode",
                    mode,
                    "--clients",
                    "3",
                    "--requests",
                    "12",
                    "--duration",
                    "60",
                    "--json",
                    f"--pid=front={front.pid}",
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
    finally:
        for worker in workers:
            worker.stop()
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["completed"] == 12 and summary["errors"] == {}
    # The default text (10 words) is 4 s of audio at 2.5 words a second.
    assert summary["audio_s"] == pytest.approx(12 * 4.0, rel=0.05)
    assert 0 < summary["ttfa_ms"]["50"] <= summary["ttfa_ms"]["95"] <= summary["ttfa_ms"]["99"]
    assert summary["processes"]["front"]["cpu_s"] > 0


def test_load_generator_refuses_non_loopback_targets():
    result = subprocess.run(
        [sys.executable, "-m", "harness.bench", "loadgen", "--base", "http://10.0.0.1:8000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0 and "loopback" in result.stderr


@pytest.mark.timeout(360)  # the reduced run takes 2 to 3 minutes on a quiet box, under its own 300 s bound
def test_side_by_side_with_piper(tmp_path):
    """The documented side-by-side command, reduced, on Piper's own server and zsynth's default: its tables parse."""
    for module in ("flask", "piper.http_server"):
        pytest.importorskip(module, reason=f"Piper's server needs {module}: the script would install it from the net")
    if importlib.metadata.version("piper-tts") != "1.8.0":
        pytest.skip("the venv's piper-tts is not 1.8.0: the script would install 1.8.0 from the net")
    example = ROOT / "docs" / "examples" / "bench-vs-piper.sh"
    (line,) = [line for line in example.read_text().splitlines() if line.strip() and not line.startswith("#")]
    command = shlex.split(line)
    assert command[:4] == [".venv/bin/python", "-m", "harness.bench", "vs-piper"], line
    figures = tmp_path / "figures.json"
    extra = ["--reduced", "--repeats", "1", "--settings", "default", "--json", str(figures)]
    result = subprocess.run(
        [sys.executable, *command[1:], *extra], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    )
    rows = {}
    for row in result.stdout.splitlines():
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if row.startswith("| ") and len(cells) == 3:
            rows[cells[0]] = cells[1:]
    assert rows[""] == ["Piper's server", rows[""][1]] and rows[""][1].startswith("zsynth, default (")
    labels = ("one sentence, first byte p50", "short command, first byte p50", "paragraph, first byte p50")
    for label in (*labels, "paragraph, whole p50"):
        assert all(re.fullmatch(r"[1-9]\d* ms", cell) for cell in rows[label]), rows[label]
    for label in (
        "agent turn (stream-input, auto_mode), first audio p50 / p95",
        "the same, 4 agents at once, p50 / p95",
    ):
        piper_cell, zsynth_cell = rows[label]  # Piper's server has no stream-input socket
        p50, p95 = re.fullmatch(r"(\d+) / (\d+) ms", zsynth_cell).groups()  # type: ignore[union-attr]
        assert piper_cell == "—" and 0 < int(p50) <= int(p95)
    assert all(float(cell) > 0 for cell in rows["4 clients: paragraphs per second"])
    for cell in rows["4 clients: first byte p50 / p95"]:
        p50, p95 = re.fullmatch(r"(\d+\.\d\d) / (\d+\.\d\d) s", cell).groups()  # type: ignore[union-attr]
        assert 0 < float(p50) <= float(p95)
    columns = json.loads(figures.read_text())["columns"]
    assert [column["setting"] for column in columns] == ["piper", "default"] and columns[1]["workers"] >= 1
    for column in columns:
        assert column["paragraph_first_p50_ms"] <= column["paragraph_whole_p50_ms"]
        assert len(column["timings"]["load"]) == 4
    # Both spoke the same paragraph in the same voice: about 20 s of audio each.
    piper, zsynth = (column["paragraph_audio_s"] for column in columns)
    assert 10 < piper < 40 and 0.8 < zsynth / piper < 1.25


#: Two sentences the simulated engine speaks in whole half-second chunks at 2.5 words a second: 10 words are 4 s
#: (8 chunks), 5 words 2 s (4 chunks).
TEN_WORDS = "One two three four five six seven eight nine ten."
FIVE_WORDS = "Short words make short turns."


@pytest.mark.parametrize("mode", ["conversation", "monologue"])
def test_conversation_driver_on_real_traffic(private_redis_url, tmp_path, mode):
    """The capacity driver (harness.bench.gpu_capacity.converse), 2 agents of 2 turns each through a real front and one
    simulated worker: every turn's audio arrives in full, its figures are the accounting of what arrived, the turns
    follow the seeded plan (each user's pause after the playback ends, or a monologue one turn ahead of it), and the
    worker's slot shares are read from its metrics."""
    from harness.bench.gpu_capacity import converse, level, plan, play

    hold = 0.01
    env = {"ZSYNTH_ENGINE": "simulated", "ZSYNTH_LOAD_TEST_ONLY": "1", "ZSYNTH_SIM_CHUNK_HOLD": str(hold)}
    worker = WorkerProcess(private_redis_url, f"sim-converse-{mode}", tmp_path, **env).wait_ready()
    pool = (TEN_WORDS, FIVE_WORDS)
    try:
        with front_process(private_redis_url, tmp_path) as (_, base):
            level_run = converse(
                base, 2, 2, seed=7, mode=mode, pause_s=(0.3, 0.6), pool=pool, metrics_url=worker.metrics_url
            )
            result = asyncio.run(level_run)
    finally:
        worker.stop()
    assert result.errors == () and result.mode == mode
    assert (result.streams, result.turns, len(result.records)) == (2, 4, 2)
    planned = plan(2, 2, 7, pause_s=(0.3, 0.6), pool=pool)
    expected_s = {TEN_WORDS: 4.0, FIVE_WORDS: 2.0}
    for agent, turns in zip(planned, result.records, strict=True):
        for turn_plan, turn in zip(agent.turns, turns, strict=True):
            assert sum(chunk.seconds for chunk in turn.chunks) == pytest.approx(
                sum(expected_s[s] for s in turn_plan.sentences), abs=0.01
            )
            arrivals = [chunk.arrived for chunk in turn.chunks]
            assert arrivals == sorted(arrivals)
        first, second = turns
        if mode == "conversation":  # the next turn only after the playback ended and the user spoke
            assert second.sent >= play(first, 0.15).ends + agent.turns[0].pause_s
        else:  # text one turn ahead: the next turn once this one starts playing, before it ends
            assert play(first, 0.15).starts <= second.sent < play(first, 0.15).ends
    assert result.audio_s == pytest.approx(sum(expected_s[s] for a in planned for t in a.turns for s in t.sentences))
    # The level ends once the last turn's audio is in: its playback (seconds after its quick chunks) and a pause
    # after it load nothing, and are not waited out.
    first_sent = min(turn.sent for turns in result.records for turn in turns)
    last_ends = max(play(turns[-1], 0.15).ends for turns in result.records)
    assert result.wall_s < last_ends - first_sent + 0.3, (result.wall_s, last_ends - first_sent)
    # The figures are the accounting of the records (behind the 150 ms jitter buffer).
    again = level(result.records, 0.15, continuous=mode == "monologue", mode=mode)
    for field in ("underruns", "first_audio_p50_s", "first_audio_p95_s", "first_audio_max_s", "dry_turns"):
        assert getattr(result, field) == getattr(again, field), field
    assert 0 < result.first_audio_p50_s <= result.first_audio_p95_s <= result.first_audio_max_s < 10
    assert result.dry_turns == sum(1 for turns in result.records for t in turns if play(t, 0.15).underruns) <= 4
    # The worker held its slot at least `hold` per half-second chunk made, and never more than the level lasted.
    chunks = result.audio_s / 0.5
    assert result.slot_engine_share is not None and result.slot_held_share is not None
    assert chunks * hold <= result.slot_engine_share * result.wall_s <= result.slot_held_share * result.wall_s
    assert result.slot_held_share < 1.0


def test_first_byte_breaks_down_http_and_wyoming_alike(tmp_path):
    """``harness.bench first-byte --transport both``: the same short command over HTTP and over Wyoming, each
    request's first audio split into the stages its spans give, Piper's call one of them; the Wyoming listener has
    no request span, so its first stage runs from the send to the push."""
    out = tmp_path / "first-byte.json"
    command = [sys.executable, "-m", "harness.bench", "first-byte", "--transport", "both", "--workers", "2"]
    done = subprocess.run(
        [*command, "--requests", "3", "--warm", "1", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "a Wyoming synthesize, new connection" in done.stdout
    figures = json.loads(out.read_text())
    for transport in ("http", "wyoming"):
        row = figures[transport]
        assert row["requests"] == 3, row
        stages = row["stages_ms"]
        assert stages["engine, first piece"]["p50"] > 5.0  # Piper spoke
        assert 0 < stages["engine, first piece"]["p50"] < row["first_byte_ms"]["p50"]
    assert figures["wyoming"]["stages_ms"]["front before the push"]["p50"] == 0.0  # the listener has no request span
