"""The load-test tools: the simulated engine (never by accident) and the load generator against a small stack."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from workers.engines import load_engine
from workers.engines.base import VoiceSpec
from zsynth.core.config import Settings

from .helpers import ROOT, WorkerProcess, front_process


def test_simulated_engine_needs_the_explicit_switch(tmp_path):
    with pytest.raises(ValueError, match="ZSYNTH_LOAD_TEST_ONLY"):
        load_engine(Settings(engine="simulated", data_dir=tmp_path))


def test_simulated_engine_emits_real_pcm_for_the_text(tmp_path):
    engine = load_engine(
        Settings(
            engine="simulated", load_test_only=True, sim_chunk_hold_s=0.01, sim_chunk_audio_s=0.5, data_dir=tmp_path
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
                    str(ROOT / "scripts" / "loadgen.py"),
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
        [sys.executable, str(ROOT / "scripts" / "loadgen.py"), "--base", "http://10.0.0.1:8000"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0 and "loopback" in result.stderr
