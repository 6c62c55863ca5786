"""Traces: a real front and a real worker export OTLP/HTTP to a loopback receiver that decodes with
opentelemetry-proto; one request's spans from both processes form one trace, parent-linked, continuing the caller's
traceparent, with the job id on the worker's span. Without ZSYNTH_OTLP_ENDPOINT nothing of OpenTelemetry is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest
from websockets.sync.client import connect as ws_connect

from harness.audio import assert_speech, decode_audio
from harness.base import ROOT, wait_for
from harness.fronts import front_process
from harness.otlp import Receiver
from harness.workers import WorkerProcess

pytestmark = pytest.mark.timeout(180)

KEY = "tracing-key"
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
SOCKET = "GET /v1/text-to-speech/{voice_id}/stream-input"
TEXT = "The first sentence of a traced request. And the second one, spoken after it."


@pytest.mark.heavy
def test_one_request_is_one_trace_across_the_front_and_the_worker(private_redis_url, tmp_path):
    pytest.importorskip("opentelemetry.sdk")
    env = {"ZSYNTH_OTLP_ENDPOINT": "", "OTEL_BSP_SCHEDULE_DELAY": "200"}  # export within 0.2 s of a span's end
    with Receiver().running() as receiver:
        env["ZSYNTH_OTLP_ENDPOINT"] = receiver.url
        worker = WorkerProcess(private_redis_url, "traced", tmp_path, **env).wait_ready()
        try:
            with front_process(private_redis_url, tmp_path, ZSYNTH_API_KEY=KEY, **env) as (_, front):
                resp = httpx.post(
                    f"{front}/v1/text-to-speech/joe?output_format=pcm_16000",
                    json={"text": TEXT},
                    headers={"xi-api-key": KEY, "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
                    timeout=60,
                )
                assert resp.status_code == 200
                assert_speech(*decode_audio(resp.content, "pcm_16000"), TEXT)
                assert resp.headers["x-trace-id"] == CALLER_TRACE
                job_id = resp.headers["history-item-id"]
                socket_turn(front)

                def both_exported() -> bool:
                    names = {(s["service"], s["name"]) for s in receiver.spans}
                    wanted = {("zsynth-front", "POST /v1/text-to-speech/{voice_id}"), ("zsynth-front", SOCKET)}
                    return wanted | {("zsynth-worker", "claimed")} <= names

                wait_for(both_exported, 30, "the front's and the worker's spans")
        finally:
            worker.stop()
    assert receiver.paths == {"/v1/traces"}
    spans = [s for s in receiver.spans if s["trace_id"] == CALLER_TRACE]
    assert {s["service"] for s in spans} == {"zsynth-front", "zsynth-worker"}
    by_name = {(s["service"], s["name"]): s for s in spans}
    request = by_name["zsynth-front", "POST /v1/text-to-speech/{voice_id}"]
    assert request["parent"] == CALLER_SPAN  # the caller's traceparent continued
    assert request["attributes"]["http.response.status_code"] == 200
    for name in ("auth", "prepare text", "queued"):
        assert by_name["zsynth-front", name]["parent"] == request["span_id"], name
    queued = by_name["zsynth-front", "queued"]
    assert queued["attributes"]["zsynth.job_id"] == job_id
    claimed = by_name["zsynth-worker", "claimed"]
    assert claimed["parent"] == queued["span_id"]  # across Redis, in the job record
    assert claimed["attributes"]["zsynth.job_id"] == job_id
    assert claimed["attributes"]["zsynth.worker_id"] == "traced"
    assert claimed["events"] == ["done"] and claimed["status"] != 2  # 2: STATUS_CODE_ERROR
    assert by_name["zsynth-worker", "first chunk"]["parent"] == claimed["span_id"]
    sentences = [s for s in spans if s["name"] == "sentence"]
    assert len(sentences) == 2 and all(s["parent"] == claimed["span_id"] for s in sentences)
    assert all(s["attributes"]["zsynth.audio_s"] > 0.5 for s in sentences)
    # A realtime socket's turn: its segment is queued under the socket's span and claimed under that.
    socket = next(s for s in receiver.spans if s["name"] == SOCKET)
    turns = [s for s in receiver.spans if s["name"] == "queued" and s["parent"] == socket["span_id"]]
    assert turns and all(t["attributes"]["zsynth.priority"] == "realtime" for t in turns)
    claims = {s["parent"] for s in receiver.spans if s["service"] == "zsynth-worker" and s["name"] == "claimed"}
    assert {t["span_id"] for t in turns} <= claims


def socket_turn(front: str) -> None:
    """One realtime turn on stream-input: a sentence flushed, audio back until isFinal."""
    url = front.replace("http://", "ws://") + "/v1/text-to-speech/joe/stream-input?output_format=pcm_16000"
    with ws_connect(url, additional_headers={"xi-api-key": KEY}, open_timeout=10) as ws:
        ws.send(json.dumps({"text": " "}))
        ws.send(json.dumps({"text": "A traced turn on the socket.", "flush": True}))
        ws.send(json.dumps({"text": ""}))
        audio = 0
        for raw in ws:
            frame = json.loads(raw)
            audio += len(frame.get("audio") or "")
            if frame.get("isFinal"):
                break
    assert audio > 0


_NO_OTEL = """
import sys
from pathlib import Path

ROOT = Path.cwd()
attempts = []


class Watch:
    \"\"\"Records who imports OpenTelemetry: the first frame outside the import machinery.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            frame = sys._getframe(1)
            while frame.f_code.co_filename.startswith("<frozen"):
                frame = frame.f_back
            attempts.append((name, frame.f_code.co_filename))
        return None


sys.meta_path.insert(0, Watch())
import numpy as np
from zsynth.core import protocol
from zsynth.core.config import Settings
from zsynth.core.tracing import Tracing
from zsynth.speech.app import create_app
from workers.engines.base import EngineChunk
from workers.engines.simulated import SimulatedEngine
from workers.metrics import WorkerMetrics
from workers.worker import Worker
import workers.main

settings = Settings.from_env(data_dir=Path(sys.argv[1]))
create_app(settings)
metrics = WorkerMetrics(settings, SimulatedEngine(0.01, 0.1), lambda: 1)
assert Tracing.from_settings(settings, "zsynth-front") is None and metrics.tracing is None
job = protocol.Job("Hello.", "joe", "pcm_16000", trace={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
figures = metrics.claimed(job)
list(metrics.chunks(job, [EngineChunk(np.zeros(1600, dtype=np.float32), "Hello.")], figures))
metrics.ended(job, protocol.Event("done", 1), figures)
ours = [(name, where) for name, where in attempts if where.startswith((str(ROOT / "zsynth"), str(ROOT / "workers")))]
print("zsynth's imports of opentelemetry:", ours)
sys.exit(1 if ours else 0)
"""


@pytest.mark.heavy
def test_without_an_endpoint_zsynth_imports_nothing_of_opentelemetry(tmp_path):
    """The app, the worker's hooks and the tracing module never import OpenTelemetry without the endpoint (redis-py 8
    loads it by itself where it is installed: only zsynth's own imports are counted)."""
    env_free = {k: v for k, v in os.environ.items() if not k.startswith("ZSYNTH_")}
    done = subprocess.run(
        [sys.executable, "-c", _NO_OTEL, str(tmp_path)], cwd=ROOT, env=env_free, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "zsynth's imports of opentelemetry: []" in done.stdout


@pytest.mark.stack
def test_an_endpoint_without_the_extra_logs_and_runs_without_traces(tmp_path, monkeypatch, caplog):
    from zsynth.core.config import Settings
    from zsynth.core.tracing import Tracing

    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # the otel extra not installed
    settings = Settings(data_dir=tmp_path).with_(telemetry_otlp_endpoint="http://127.0.0.1:4318")
    assert Tracing.from_settings(settings, "zsynth-front") is None
    assert "otel extra is not installed" in caplog.text
