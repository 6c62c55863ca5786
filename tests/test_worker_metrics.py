"""Each worker's own Prometheus endpoint, scraped from the real shared Piper workers after real requests; its port,
its failure to bind, and the GPU figures' absence on a CPU box."""

from __future__ import annotations

import logging
import socket
import sys
import urllib.request

import pytest

from harness.audio import assert_speech, decode_audio
from harness.base import LONG_TEXT, free_port, wait_for
from harness.measure import sample_sum, scrape
from workers.metrics import NvmlCollector, gpu_collector
from zsynth.core.config import Settings


@pytest.mark.stack
async def test_the_workers_export_their_jobs_engine_time_rtf_waits_and_memory(client, shared_workers):
    before = [scrape(worker.metrics_url) for worker in shared_workers]
    texts = ["The first request of the metrics test.", "And a second one, streamed this time."]
    resp = await client.post("/v1/text-to-speech/joe?output_format=pcm_16000", json={"text": texts[0]})
    samples, rate = decode_audio(await resp.read(), "pcm_16000")
    assert_speech(samples, rate, texts[0])
    resp = await client.post("/v1/text-to-speech/joe/stream?output_format=mp3_22050_32", json={"text": texts[1]})
    assert resp.status == 200 and len(await resp.read()) > 1000
    # A batch job long enough to be spoken in pieces, next to a realtime-priority one: it may yield its slot.
    resp = await client.post("/v1/text-to-speech/joe?output_format=pcm_16000", json={"text": LONG_TEXT[:600]})
    assert resp.status == 200
    after = [scrape(worker.metrics_url) for worker in shared_workers]

    def grew(name: str, **labels: str) -> float:
        return sum(
            sample_sum(a, name, **labels) - sample_sum(b, name, **labels) for a, b in zip(after, before, strict=True)
        )

    assert grew("zsynth_worker_jobs_total", outcome="done", priority="batch") == 3
    assert grew("zsynth_worker_queue_wait_seconds_count", part="first") == 3
    assert grew("zsynth_worker_first_chunk_seconds_count") == 3
    assert grew("zsynth_worker_engine_seconds_count") >= 4  # a chunk per sentence at least
    assert grew("zsynth_worker_engine_seconds_sum") > 0
    # The slot is held from each claim to the job's end: at least the engine's own time in it.
    assert grew("zsynth_worker_busy_seconds_total") >= grew("zsynth_worker_engine_seconds_sum") > 0
    assert grew("zsynth_worker_real_time_factor_count") >= 3
    # Piper on a CPU core: well under 1 (every job above was spoken faster than it plays).
    for scraped in after:
        count = sample_sum(scraped, "zsynth_worker_real_time_factor_count")
        if count:
            assert 0 < sample_sum(scraped, "zsynth_worker_real_time_factor_sum") / count < 1.0
    assert grew("zsynth_worker_audio_seconds_total") > 5.0
    assert grew("zsynth_worker_voice_lookups_total", result="builtin") >= 3
    for worker, scraped in zip(shared_workers, after, strict=True):
        assert sample_sum(scraped, "zsynth_worker_info", worker_id=worker.worker_id, engine="piper") == 1
        assert 50 * 10**6 < sample_sum(scraped, "zsynth_worker_rss_bytes") < 2 * 1024**3
        assert sample_sum(scraped, "zsynth_worker_max_rss_bytes") == 2 * 1024**3  # Piper's default ceiling
        assert sample_sum(scraped, "process_resident_memory_bytes") > 0
        assert sample_sum(scraped, "zsynth_worker_memory_ceiling_stops_total") == 0
        # A CPU engine exports no GPU figures at all (no zeros that would look like an idle GPU).
        assert not any(name.startswith("zsynth_worker_gpu_") for name, _ in scraped)
    wait_for(
        lambda: all(sample_sum(scrape(w.metrics_url), "zsynth_worker_busy") == 0 for w in shared_workers), 10, "idle"
    )


@pytest.mark.stack
def test_the_port_is_the_base_plus_the_worker_index_on_loopback():
    settings = Settings.from_env({"ZSYNTH_WORKER_METRICS_PORT": "9300", "ZSYNTH_WORKER_INDEX": "3"})
    assert (settings.worker.metrics_port + settings.worker.index, settings.worker.metrics_host) == (9303, "127.0.0.1")
    assert Settings.from_env({}).worker.metrics_port == 0  # off unless set (the systemd units set it)


@pytest.mark.stack
def test_a_port_taken_is_logged_and_the_worker_serves_without_it(tmp_path, caplog):
    from workers.engines.simulated import SimulatedEngine
    from workers.metrics import WorkerMetrics

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = Settings(data_dir=tmp_path).with_(worker_metrics_port=port, worker_id="w-taken")
        metrics = WorkerMetrics(settings, SimulatedEngine(0.01, 0.1), lambda: 1)
        with caplog.at_level(logging.ERROR):
            assert metrics.serve() is None
        assert "metrics endpoint" in caplog.text and str(port) in caplog.text
    free = free_port()
    settings = Settings(data_dir=tmp_path).with_(worker_metrics_port=free - 2, worker_index=2, worker_id="w-free")
    metrics = WorkerMetrics(settings, SimulatedEngine(0.01, 0.1), lambda: 123)
    try:
        assert metrics.serve() == free
        with urllib.request.urlopen(f"http://127.0.0.1:{free}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert "zsynth_worker_max_rss_bytes 123.0" in text
    finally:
        metrics.close()


@pytest.mark.unit
def test_no_gpu_collector_for_a_cpu_engine_nor_without_nvml(monkeypatch):
    assert gpu_collector(Settings(engine="piper")) is None
    assert gpu_collector(Settings(engine="turbo").with_(turbo_device="cpu")) is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed: the import fails
    assert NvmlCollector.open("0") is None


@pytest.mark.unit
def test_nvml_without_a_driver_turns_the_gpu_figures_off():
    pytest.importorskip("pynvml")
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        assert NvmlCollector.open("0") is None  # this box: the library imports, no driver answers
    else:
        pytest.skip("a GPU driver answers here: covered by the GPU check (scripts/gpu_metrics_check.py)")
