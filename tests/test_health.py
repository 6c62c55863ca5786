"""Liveness and readiness."""

from __future__ import annotations

import ipaddress

import pytest

from harness.base import make_settings
from zsynth.services.keys import SETTINGS
from zsynth.speech.app import create_app


@pytest.mark.stack
async def test_healthz(client):
    resp = await client.get("/healthz")
    assert resp.status == 200
    assert (await resp.json()) == {"status": "ok"}


@pytest.mark.stack
async def test_readyz_with_workers(client):
    resp = await client.get("/readyz")
    body = await resp.json()
    assert resp.status == 200
    assert body["status"] == "ready" and body["workers"] >= 2
    # A plain URL: the master is that URL's address (shown to this loopback caller), and no failover was seen.
    port = client.app[SETTINGS].redis.url.rsplit(":", 1)[1].split("/")[0]
    assert (body["redis_mode"], body["redis_master"], body["redis_promotions"]) == ("direct", f"127.0.0.1:{port}", 0)


@pytest.mark.stack
async def test_readyz_names_the_redis_master_to_callers_on_the_box_only(aiohttp_client, redis_url, data_dir):
    """Issue 36 F9: behind nginx on the same box, every client's request came from loopback, so /readyz showed
    anyone the Redis master. The caller is now the client a trusted proxy names, as for every per-address limit."""
    proxied = make_settings(redis_url, data_dir, http_trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),))
    client = await aiohttp_client(create_app(proxied))

    async def shown(app_client, **headers: str) -> bool:
        return "redis_master" in await (await app_client.get("/readyz", headers=headers)).json()

    assert not await shown(client, **{"X-Forwarded-For": "203.0.113.9"})  # a remote client of the proxy
    assert not await shown(client, **{"X-Forwarded-For": "127.0.0.1, 203.0.113.9"})  # one that wrote its own
    assert await shown(client, **{"X-Forwarded-For": "127.0.0.1"})  # a probe on the box, through the proxy
    assert await shown(client)  # a probe on the box, straight to the front
    # No trusted proxy: a request some proxy relayed (it says so) is nobody's on the box, whatever its peer.
    plain = await aiohttp_client(create_app(make_settings(redis_url, data_dir)))
    assert not await shown(plain, **{"X-Forwarded-For": "203.0.113.9"})
    assert not await shown(plain, Forwarded="for=203.0.113.9")
    assert await shown(plain)


@pytest.mark.stack
async def test_readyz_without_workers(aiohttp_client, private_redis_url, tmp_path):
    client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
    resp = await client.get("/readyz")
    assert resp.status == 503
    assert (await resp.json())["status"] == "not_ready"


def metric(text: str, name: str, labels: str = "") -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    prefix = f"{name}{{{labels}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.stack
async def test_metrics_move_after_a_request(client):
    before = await (await client.get("/metrics")).text()
    text = "Metrics count this sentence."
    resp = await client.post("/v1/text-to-speech/v?output_format=pcm_16000", json={"text": text})
    assert resp.status == 200
    audio_s = len(await resp.read()) / 2 / 16000
    after_resp = await client.get("/metrics")
    assert after_resp.headers["Content-Type"].startswith("text/plain")
    after = await after_resp.text()
    assert (
        metric(after, "zsynth_jobs_total", 'outcome="done"')
        == metric(before, "zsynth_jobs_total", 'outcome="done"') + 1
    )
    assert metric(after, "zsynth_characters_total") - metric(before, "zsynth_characters_total") == len(text)
    delivered = metric(after, "zsynth_audio_seconds_total") - metric(before, "zsynth_audio_seconds_total")
    assert abs(delivered - audio_s) < 0.05
    assert metric(after, "zsynth_time_to_first_audio_seconds_count", 'priority="batch"') >= 1
    assert metric(after, "zsynth_workers_live") >= 2


@pytest.mark.unit
def test_json_logs_carry_ids(capsys):
    import logging

    from zsynth.core.config import Settings
    from zsynth.core.logs import setup_logging

    setup_logging(Settings().with_(telemetry_log_json=True), "front")
    try:
        logging.getLogger("zsynth.test").info("job %s queued", "abc", extra={"job_id": "abc", "request_id": "r1"})
        line = capsys.readouterr().err.strip().splitlines()[-1]
    finally:
        logging.getLogger().handlers.clear()
    import json

    entry = json.loads(line)
    assert entry["msg"] == "job abc queued" and entry["job_id"] == "abc" and entry["request_id"] == "r1"
    assert entry["level"] == "info"
