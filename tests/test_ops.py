"""Operating zsynth: systemd units, READY notification, worker health check, graceful drain of a front."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from harness.audio import assert_speech
from harness.base import ROOT
from harness.fronts import front_process
from harness.workers import WorkerProcess
from workers.cores import CoreShare
from zsynth.core.config import Settings, default_engine_threads, default_workers, usable_cores


@pytest.mark.heavy
def test_systemd_units_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: scripts/install --test installs it"
    subprocess.run(
        [str(ROOT / "scripts" / "install-systemd"), "--render-to", str(tmp_path), "--venv", sys.prefix], check=True
    )
    # A template unit is verified through an instance name.
    shutil.copy(tmp_path / "zsynth-worker@.service", tmp_path / "zsynth-worker@0.service")
    units = [tmp_path / name for name in ("zsynth-front.service", "zsynth-worker@0.service", "zsynth-avatar.service")]
    units.append(tmp_path / "zsynth.target")
    result = subprocess.run(
        [analyze, "verify", "--man=no", *map(str, units)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    worker_unit = (tmp_path / "zsynth-worker@.service").read_text()
    assert "Type=notify" in worker_unit and "CUDA_VISIBLE_DEVICES=%i" in worker_unit
    assert f"ExecStart={sys.prefix}/bin/zsynth worker" in worker_unit


@pytest.mark.heavy
def test_install_systemd_dry_run_changes_nothing():
    result = subprocess.run(
        [str(ROOT / "scripts" / "install-systemd"), "--dry-run", "--gpus", "2", "--prefix", "/nonexistent/zsynth"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "+ systemctl enable zsynth.target" in result.stdout
    assert "zsynth-worker@1.service" in result.stdout
    assert "monitoring/zsynth-rules.yml /etc/zsynth/monitoring/" in result.stdout  # next to the Prometheus example
    assert not Path("/nonexistent/zsynth").exists()


@pytest.mark.heavy
def test_install_systemd_enables_a_worker_per_core_for_piper():
    result = subprocess.run(
        [str(ROOT / "scripts" / "install-systemd"), "--dry-run", "--prefix", "/nonexistent/zsynth"],
        capture_output=True,
        text=True,
        check=True,
    )
    cores = default_workers("piper", usable_cores())
    assert f"zsynth-worker@{cores - 1}.service" in result.stdout
    assert f"zsynth-worker@{cores}.service" not in result.stdout
    assert f"zsynth installed: {cores} worker(s)" in result.stderr


@pytest.mark.heavy
def test_install_systemd_refuses_a_worker_count_that_is_not_a_count():
    # Bash arithmetic would take "abc" as 0 workers and "1e9" as a loop without end: both are refused up front.
    for count in ("abc", "0", "1e9", "-1", "3;reboot"):
        result = subprocess.run(
            [
                str(ROOT / "scripts" / "install-systemd"),
                "--dry-run",
                "--prefix",
                "/nonexistent/zsynth",
                "--workers",
                count,
            ],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 2 and "--workers takes a whole number" in result.stderr, count
        assert "zsynth-worker@" not in result.stdout, count
    three = subprocess.run(
        [str(ROOT / "scripts" / "install-systemd"), "--dry-run", "--prefix", "/nonexistent/zsynth", "--workers", "3"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "zsynth-worker@2.service" in three.stdout and "zsynth-worker@3.service" not in three.stdout


@pytest.mark.unit
def test_cpu_defaults_follow_the_cores():
    # Piper: a worker per core, each job on two threads where there are two; other engines one of each.
    assert [default_workers("piper", n) for n in (1, 2, 8)] == [1, 2, 8]
    assert [default_engine_threads("piper", n) for n in (1, 2, 8)] == [1, 2, 2]
    assert default_workers("turbo", 8) == 1 and default_engine_threads("turbo", 8) == 1
    defaults = Settings.from_env({})
    assert defaults.worker_count == default_workers("piper") and defaults.engine_thread_count >= 1
    chosen = Settings.from_env({"ZSYNTH_WORKERS": "3", "ZSYNTH_ENGINE_THREADS": "4"})
    assert (chosen.worker_count, chosen.engine_thread_count) == (3, 4)


@pytest.mark.heavy
def test_worker_sends_ready_after_warm_up(private_redis_url, tmp_path):
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(90)
        worker = WorkerProcess(private_redis_url, "notify-test", tmp_path, NOTIFY_SOCKET=str(path))
        try:
            message = sock.recv(4096).decode()
            assert "READY=1" in message
            # READY comes after the heartbeat exists: systemd may route traffic to it at once.
            worker.wait_ready(timeout=5)
        finally:
            worker.stop()
        assert worker.proc.returncode == 0


@pytest.mark.heavy
def test_worker_check_command(shared_workers, redis_url):
    env = dict(os.environ, ZSYNTH_REDIS_URL=redis_url, ZSYNTH_HEARTBEAT_TTL="3")
    ok = subprocess.run(
        [sys.executable, "-m", "zsynth", "worker", "--check", "--worker-id", shared_workers[0].worker_id], env=env
    )
    assert ok.returncode == 0
    missing = subprocess.run([sys.executable, "-m", "zsynth", "worker", "--check", "--worker-id", "nobody"], env=env)
    assert missing.returncode == 1


@pytest.mark.heavy
async def test_sigterm_drains_running_stream(redis_url, data_dir, shared_workers):
    text = " ".join(
        f"Sentence {n} of a text that is still being spoken when the front is told to stop." for n in range(6)
    )
    with front_process(redis_url, data_dir) as (proc, base):
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"{base}/v1/text-to-speech/v/stream?output_format=pcm_22050", json={"text": text}
            ) as resp:
                assert resp.status == 200
                first = await resp.content.readany()
                proc.send_signal(signal.SIGTERM)
                rest = await resp.read()
            # New connections are refused while (and after) it drains.
            started = time.monotonic()
            while proc.poll() is None and time.monotonic() - started < 30:
                time.sleep(0.1)
        assert proc.returncode == 0
    samples = np.frombuffer(first + rest, dtype="<i2").astype(np.float32) / 32768
    assert_speech(samples, 22050, text)


@pytest.mark.heavy
def test_core_share_sees_the_other_workers_of_the_box(tmp_path):
    first, second = CoreShare(tmp_path, "w1"), CoreShare(tmp_path, "w2")
    try:
        assert not first.others_busy() and not second.others_busy()
        with second.busy():
            assert first.others_busy() and not second.others_busy()
        assert not first.others_busy()
        # A worker that died mid-job leaves its file; the kernel dropped its lock, so it reads as idle.
        gone = subprocess.run(
            [sys.executable, "-c", DIES_BUSY, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, check=True
        )
        assert gone.stdout == "busy\n" and (tmp_path / "w3.lock").exists()
        assert not first.others_busy()
    finally:
        first.close()
        second.close()


DIES_BUSY = """
import os, sys
from pathlib import Path
from workers.cores import CoreShare
share = CoreShare(Path(sys.argv[1]), "w3")
share.busy().__enter__()
print("busy", flush=True)
os._exit(0)
"""


@pytest.mark.heavy
async def test_two_thread_workers_share_the_box(private_redis_url, tmp_path):
    # The CPU default: two workers of two threads each; both speak at once, each marking itself busy in the box's
    # cores directory (the other then speaks on one thread), and every answer is whole speech.
    workers = [WorkerProcess(private_redis_url, f"cores-{n}", tmp_path, ZSYNTH_ENGINE_THREADS="2") for n in (0, 1)]
    try:
        for worker in workers:
            worker.wait_ready(90)
        text = "The parcel came on Monday. It was left at the door, in the rain, for most of the afternoon."
        with front_process(private_redis_url, tmp_path) as (_, base):
            async with aiohttp.ClientSession() as session:

                async def speak() -> bytes:
                    url = f"{base}/v1/text-to-speech/v/stream?output_format=pcm_22050"
                    async with session.post(url, json={"text": text}) as resp:
                        assert resp.status == 200
                        return await resp.read()

                bodies = await asyncio.gather(*(speak() for _ in range(4)))
        for body in bodies:
            assert_speech(np.frombuffer(body, dtype="<i2").astype(np.float32) / 32768, 22050, text)
        assert sorted(path.name for path in (tmp_path / "cores").iterdir()) == ["cores-0.lock", "cores-1.lock"]
    finally:
        for worker in workers:
            worker.stop()
