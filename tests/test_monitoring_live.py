"""The dashboard and the rules against a live Prometheus (Debian's binary) on loopback, scraping a real front and two
real Piper workers: after a short mixed load every panel's query parses and returns data, and a killed worker fires
ZsynthWorkerDown within its ``for:`` plus two scrape intervals. The live Prometheus loads the committed rules with
that alert's ``for:`` cut from a minute to a few seconds (the expression and everything else as committed): the
minute itself is promtool's to check (zsynth-rules.test.yml, tests/test_monitoring_rules.py), not worth a minute of
waiting here."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from websockets.sync.client import connect as ws_connect

from harness.audio import assert_speech, decode_audio
from harness.base import LONG_TEXT, ROOT, free_port, wait_for
from harness.dashboard import OUT as DASHBOARD
from harness.dashboard import PANELS, render
from harness.fronts import front_process
from harness.workers import WorkerProcess

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]

KEY = "monitoring-live-key"
SCRAPE_S = 1.0  # scrape and rule evaluation interval of the test's Prometheus
RULES = ROOT / "systemd" / "monitoring" / "zsynth-rules.yml"
WORKER_DOWN_FOR_S = 5.0  # ZsynthWorkerDown's for: in the live Prometheus's copy of the rules (committed: 1m)


def worker_down_rule(groups: dict[str, Any]) -> dict[str, Any]:
    """The ZsynthWorkerDown rule of a rules file's groups."""
    return [r for g in groups["groups"] for r in g["rules"] if r.get("alert") == "ZsynthWorkerDown"][0]


def live_rules(directory: Path) -> Path:
    """The committed rules with ZsynthWorkerDown's ``for:`` cut to :data:`WORKER_DOWN_FOR_S`, written to
    ``directory``."""
    groups = yaml.safe_load(RULES.read_text())
    worker_down_rule(groups)["for"] = f"{WORKER_DOWN_FOR_S:g}s"
    copy = directory / "zsynth-rules.yml"
    copy.write_text(yaml.safe_dump(groups, sort_keys=False))
    return copy


def prometheus_config(front: str, workers: list[WorkerProcess], rules: Path) -> dict[str, Any]:
    """The example config's jobs (systemd/monitoring/prometheus.yml) on this test's ports, with short intervals."""
    example = yaml.safe_load((ROOT / "systemd" / "monitoring" / "prometheus.yml").read_text())
    jobs = {job["job_name"] for job in example["scrape_configs"]}
    assert {"zsynth-front", "zsynth-worker"} <= jobs
    return {
        "global": {"scrape_interval": f"{SCRAPE_S:g}s", "evaluation_interval": f"{SCRAPE_S:g}s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "zsynth-front",
                "authorization": {"credentials": KEY},  # the front has a key: /metrics needs it
                "static_configs": [{"targets": [front.removeprefix("http://")]}],
            },
            {
                "job_name": "zsynth-worker",
                "static_configs": [{"targets": [f"127.0.0.1:{w.metrics_port}" for w in workers]}],
            },
        ],
    }


@contextlib.contextmanager
def prometheus(config: dict[str, Any], directory: Path) -> Iterator[str]:
    """Debian's prometheus on a free loopback port with ``config``; yields its base URL once ready."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: scripts/install --test installs Debian's package"
    port = free_port()
    config_file = directory / "prometheus.yml"
    config_file.write_text(json.dumps(config))  # JSON is YAML
    log = (directory / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config_file}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, (directory / "prometheus.log").read_text()
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{base}/-/ready", timeout=2).status_code == 200
        return False

    try:
        wait_for(ready, 60, "prometheus ready", interval=0.2)
        yield base
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()


def query(base: str, expr: str) -> list[dict[str, Any]]:
    """An instant query through the HTTP API; fails on a parse or evaluation error."""
    resp = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=10)
    body = resp.json()
    assert resp.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def mixed_load(front: str) -> None:
    """HTTP batch jobs, a stream its client leaves, a realtime socket's segments, and a refused credential."""
    headers = {"xi-api-key": KEY}
    for n in range(3):
        text = f"Request number {n} of the monitoring test."
        resp = httpx.post(
            f"{front}/v1/text-to-speech/joe?output_format=pcm_16000", json={"text": text}, headers=headers, timeout=60
        )
        assert resp.status_code == 200
        assert_speech(*decode_audio(resp.content, "pcm_16000"), text)
    # A client that leaves after the first bytes: its job ends cancelled.
    with httpx.stream(
        "POST",
        f"{front}/v1/text-to-speech/joe/stream?output_format=pcm_16000",
        json={"text": LONG_TEXT},
        headers=headers,
        timeout=60,
    ) as resp:
        assert resp.status_code == 200
        next(resp.iter_bytes())
    url = front.replace("http://", "ws://") + "/v1/text-to-speech/joe/stream-input?output_format=pcm_16000"
    with ws_connect(url, additional_headers=headers, open_timeout=10) as ws:
        ws.send(json.dumps({"text": " "}))
        ws.send(json.dumps({"text": "A realtime sentence over the socket. And a second one.", "flush": True}))
        ws.send(json.dumps({"text": ""}))
        audio = 0
        for raw in ws:
            frame = json.loads(raw)
            audio += len(frame.get("audio") or "")
            if frame.get("isFinal"):
                break
        assert audio > 0
    assert httpx.get(f"{front}/v1/voices", headers={"xi-api-key": "wrong"}, timeout=10).status_code == 401


def test_the_committed_dashboard_is_the_generated_one():
    assert DASHBOARD.read_text() == render(), "run: python -m harness.dashboard"
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert [p["title"] for p in panels] == [p.title for p in PANELS]


def test_every_panel_returns_data_and_a_killed_worker_fires_worker_down(private_redis_url, tmp_path):
    workers = [WorkerProcess(private_redis_url, f"mon-{n}", tmp_path) for n in range(2)]
    try:
        for worker in workers:
            worker.wait_ready()
        with (
            front_process(private_redis_url, tmp_path, ZSYNTH_API_KEY=KEY) as (_, front),
            prometheus(prometheus_config(front, workers, live_rules(tmp_path)), tmp_path) as prom,
        ):
            wait_for(lambda: len(query(prom, "up == 1")) == 3, 30, "three targets up", interval=0.2)
            mixed_load(front)

            # Every figure of the load reaches Prometheus a scrape or two after it happened, and a rate() over a
            # series born during the load (the refused key is the last thing it does) needs two samples of it: so
            # poll until every CPU panel has data, then name the ones that never got any.
            def empty_panels() -> list[str]:
                empty = []
                for panel in PANELS:
                    for q in panel.queries:
                        found = query(prom, q.expr.replace("$__rate_interval", "1m"))
                        if panel.gpu:
                            assert found == [], f"{q.expr}: GPU figures from Piper workers"  # parsed, empty on CPU
                        elif not found:
                            empty.append(f"{panel.title}: {q.expr}")
                return empty

            deadline = time.monotonic() + 30
            while (empty := empty_panels()) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not empty, "panel queries without data 30 s after the load:\n" + "\n".join(empty)
            assert float(query(prom, "sum(zsynth_worker_jobs_total)")[0]["value"][1]) >= 5
            assert query(prom, 'sum(zsynth_jobs_total{outcome="cancelled"})')

            killed = workers[1]
            killed.kill()
            died = time.monotonic()
            alert_for_s = WORKER_DOWN_FOR_S
            assert worker_down_rule(yaml.safe_load(RULES.read_text()))["for"] == "1m"  # as committed

            def firing() -> list[dict[str, Any]]:
                alerts = httpx.get(f"{prom}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
                return [a for a in alerts if a["labels"]["alertname"] == "ZsynthWorkerDown" and a["state"] == "firing"]

            # Within for: plus two scrape intervals (and one rule evaluation, and the poll's own step).
            wait_for(firing, alert_for_s + 2 * SCRAPE_S + SCRAPE_S + 5.0, "ZsynthWorkerDown firing", interval=0.25)
            took = time.monotonic() - died
            alerts = firing()
            assert [a["labels"]["instance"] for a in alerts] == [f"127.0.0.1:{killed.metrics_port}"]
            assert alert_for_s <= took <= alert_for_s + 2 * SCRAPE_S + SCRAPE_S + 5.0  # for: is honoured, then fires
            print(f"ZsynthWorkerDown fired {took:.1f} s after the kill (for: {alert_for_s:g} s, scrape {SCRAPE_S:g} s)")
    finally:
        for worker in workers:
            worker.stop()
