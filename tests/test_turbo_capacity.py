"""The capacity run's accounting (harness/bench/gpu_capacity.py) on hand-made schedules: no engine, no sockets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench.gpu_capacity import (
    Chunk,
    LevelResult,
    Turn,
    capacity,
    expected_streams,
    level,
    play,
    predict,
    simulated_sentence_s,
    summary_lines,
)

pytestmark = pytest.mark.heavy


def test_chunks_in_time_play_without_a_gap():
    # 0.5 s chunks arriving every 0.4 s: each lands before the previous one has finished playing.
    turn = Turn(sent=10.0, chunks=[Chunk(10.12 + 0.4 * i, 0.5) for i in range(5)])
    played = play(turn)
    assert played.underruns == 0 and played.starved_s == 0.0
    assert played.first_audio_s == pytest.approx(0.12)


def test_a_late_chunk_is_one_underrun_and_the_playback_restarts_from_it():
    chunks = [Chunk(1.0, 0.5), Chunk(1.3, 0.5), Chunk(2.2, 0.5), Chunk(2.6, 0.5)]
    # Playback: 1.0-1.5, 1.5-2.0, then waits for the third (arrives 2.2: 0.2 s of silence), 2.2-2.7, 2.7-3.2.
    played = play(Turn(sent=0.9, chunks=chunks))
    assert played.underruns == 1 and played.starved_s == pytest.approx(0.2)
    # The fourth chunk arrived at 2.6, before the restarted playback reached it (2.7): not an underrun.
    late_again = play(Turn(sent=0.9, chunks=[*chunks[:3], Chunk(2.75, 0.5)]))
    assert late_again.underruns == 2 and late_again.starved_s == pytest.approx(0.25)


def test_a_chunk_exactly_on_time_is_no_underrun_and_an_empty_turn_never_started():
    assert play(Turn(0.0, [Chunk(0.1, 0.5), Chunk(0.6, 0.5)])).underruns == 0
    assert play(Turn(0.0, [])).first_audio_s == float("inf")


def test_a_jitter_buffer_absorbs_late_chunks_up_to_its_length():
    # 0.5 s chunks: the second lands 0.6 s after the first, 0.1 s after a bare playback needed it.
    turn = Turn(sent=0.0, chunks=[Chunk(0.1, 0.5), Chunk(0.7, 0.5), Chunk(1.35, 0.5)])
    assert play(turn).underruns == 2
    buffered = play(turn, buffer_s=0.15)  # plays 0.25-0.75, 0.75-1.25, 1.25: the third is 0.1 s late
    assert buffered.underruns == 1 and buffered.starts == pytest.approx(0.25)
    assert buffered.starved_s == pytest.approx(0.1) and buffered.ends == pytest.approx(1.35 + 0.15 + 0.5)
    assert play(turn, buffer_s=0.25).underruns == 0


def test_a_monologue_turn_is_due_where_the_previous_one_ends():
    turn = Turn(sent=5.0, chunks=[Chunk(5.1, 0.5), Chunk(5.2, 0.5)])
    on_time = play(turn, buffer_s=0.15, after=5.4)  # the previous turn's playback ends at 5.4
    assert (on_time.underruns, on_time.starts) == (0, 5.4) and on_time.ends == pytest.approx(6.4)
    late = play(turn, buffer_s=0.15, after=5.0)  # the listener waited from 5.0 for the first chunk
    assert late.underruns == 1 and late.starved_s == pytest.approx(0.1) and late.starts == pytest.approx(5.25)
    runs = level([[Turn(0.0, [Chunk(0.1, 0.5)]), turn]], buffer_s=0.15, continuous=True, mode="monologue")
    assert runs.dry_turns == 1 and runs.underruns == (1,) and runs.audio_s == pytest.approx(1.5)
    apart = level([[Turn(0.0, [Chunk(0.1, 0.5)]), turn]], buffer_s=0.15)  # each turn from its own first chunk
    assert apart.dry_turns == 0 and apart.first_audio_max_s == pytest.approx(0.1)
    # A monologue passes on being fed alone: its turns go a turn ahead, their first audio is not waited for.
    slow = [Turn(0.0, [Chunk(0.5, 0.5)]), Turn(0.4, [Chunk(0.9, 0.5)])]
    assert level([slow], 0.15, continuous=True, mode="monologue").passes
    assert not level([slow], 0.15, continuous=False, mode="conversation").passes


def test_levels_and_the_capacity_figure():
    on_time = [Turn(0.0, [Chunk(0.1, 0.5), Chunk(0.5, 0.5)]), Turn(5.0, [Chunk(5.2, 0.5)])]
    slow_start = [Turn(0.0, [Chunk(0.35, 0.5)])]
    gap = [Turn(0.0, [Chunk(0.1, 0.5), Chunk(0.9, 0.5)])]
    one = level([on_time])
    assert one.passes and one.underruns == (0,) and one.first_audio_p95_s == pytest.approx(0.2)
    two = level([on_time, on_time])
    three = level([on_time, on_time, gap])
    assert three.underruns == (0, 0, 1) and not three.passes
    four = level([on_time, slow_start, on_time, on_time])
    assert four.underruns == (0, 0, 0, 0) and four.first_audio_p95_s == pytest.approx(0.35) and not four.passes
    assert capacity([one, two, three, four]) == 2
    assert capacity([three, one]) == 1, "levels count in order of N, whatever order they come in"
    assert capacity([LevelResult(1, (1,), 0.1, 0.1)]) == 0
    lines = summary_lines({1: one, 3: three})
    assert "FAIL" in lines[1] and lines[-1].startswith("capacity: 1 realtime voices")


def test_what_an_rtf_allows():
    # 0.1: a chunk holds the slot 50 ms, so six first chunks due together fit in 300 ms (throughput allows 10).
    assert expected_streams(0.1, 0.5) == 6
    assert expected_streams(0.02, 0.5) == 30  # 10 ms a chunk; throughput 50
    assert expected_streams(0.01, 0.25) == 100  # latency allows 120; throughput 100
    assert expected_streams(0.5, 0.25) == 2 and expected_streams(2.0, 0.25) == 0
    assert simulated_sentence_s(0.5) == 5.0  # 12 words at 2.5 a second: 4.8 s, in whole half-second chunks
    with pytest.raises(ValueError):
        expected_streams(0.0, 0.5)


def test_what_the_formulas_predict_on_the_simulated_engine():
    """The figures docs/gpu-run.md gives ("What the figures should be"): the driver's turns average 6.75 s of audio
    (4-5 s sentences, 1-2 a turn), its agents' cycles 11.4 s (and a 4.5 s pause, a 0.15 s buffer)."""
    alone = predict(1, 0.04)
    assert alone.turn_audio_s == pytest.approx(6.75) and alone.first_audio_alone_s == pytest.approx(0.027)
    assert alone.first_audio_p95_one_job_s == alone.first_audio_alone_s  # one agent never finds the slot busy
    four, twelve = predict(4, 0.04), predict(12, 0.04)
    assert four.slot_share == pytest.approx(0.0947, abs=1e-4) and twelve.slot_share == pytest.approx(0.2842, abs=1e-4)
    assert four.first_audio_p95_one_job_s == pytest.approx(0.133, abs=0.001)
    assert twelve.first_audio_p95_one_job_s == pytest.approx(0.392, abs=0.001)
    assert twelve.first_audio_max_one_job_s == pytest.approx(0.027 + 11 * 0.04 * 10)  # ten-second turns queued first
    assert twelve.first_audio_p95_by_chunk_s == pytest.approx(0.047) and twelve.throughput_agents == 42
    # Monologues: the slot makes 1 / RTF seconds of audio a second.
    assert predict(4, 0.2, "monologue").slot_share == pytest.approx(0.8)
    assert predict(6, 0.2, "monologue").audio_per_s == pytest.approx(5.0)
    assert [predict(1, rtf, "monologue").throughput_agents for rtf in (0.04, 0.072, 0.2)] == [25, 13, 5]
    assert predict(30, 0.04).first_audio_p95_one_job_s <= predict(30, 0.04).first_audio_max_one_job_s
    with pytest.raises(ValueError):
        predict(0, 0.04)


@pytest.mark.timeout(600)
def test_capacity_run_on_the_simulated_engine_finds_what_its_rtf_allows() -> None:
    """The live run, reduced (a real front, Redis and worker; agent sockets with auto_mode) on the simulated
    engine at an RTF of 0.1: every level up to 3 passes, as the worker that shares its slot chunk by chunk allows 6
    (a worker running one sentence job at a time allowed 1, and failed levels 2 and 3). About a minute and a half."""
    result = subprocess.run(
        [sys.executable, "-m", "harness.bench", "gpu-capacity", "--reduced", "--rtf", "0.1", "--levels", "1,2,3"],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=500,
        check=True,
    )
    figure = [line for line in result.stdout.splitlines() if line.startswith("capacity_figure=")]
    allowed = expected_streams(0.1, 0.5)
    assert allowed == 6
    assert figure == [f"capacity_figure={min(allowed, 3)}"], result.stdout
    assert "N=  1  underruns    0" in result.stdout


@pytest.mark.timeout(1500)
def test_prepared_gpu_run_reduced_end_to_end(tmp_path: Path, turbo_ckpt: Path) -> None:
    """HEAVY (a couple of minutes on two cores: the tiny checkpoint's S3Gen is full size):
    ``./scripts/gpu-run --reduced`` runs every phase on the CPU, the capacity phase on the simulated engine, and
    writes its figures. It is given the session's checkpoint (``--checkpoint``; its own build is the same
    ``write_random_checkpoint`` the Turbo tests run)."""
    import json
    import os

    pytest.importorskip("torch")
    pytest.importorskip("chatterbox")
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, OUT=str(tmp_path / "out"), WHEELS="", PYTHON=sys.executable)
    done = subprocess.run(
        [
            *("./scripts/gpu-run", "--reduced", "--requests", "1"),
            *("--checkpoint", str(turbo_ckpt), "--work-dir", str(tmp_path / "work")),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1400,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "gpu-figures.json").read_text())
    assert "errors" not in report and report["meta"]["mode"].startswith("reduced")
    assert report["streaming"]["float32"]["short"]["requests"] == 1
    capacity = report["capacity"]
    assert (capacity["engine"], capacity["mode"]) == ("simulated", "conversation")
    assert sorted(capacity["levels"]) == ["1", "2"]
    for n, row in capacity["levels"].items():
        assert row["errors"] == [] and row["turns"] == 2 * int(n) and row["slot_engine_share"] > 0
    assert "Conversing voice agents (simulated engine" in (tmp_path / "out" / "gpu-figures.md").read_text()
