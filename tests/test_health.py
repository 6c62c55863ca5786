"""Liveness and readiness."""

from __future__ import annotations

from zsynth.app import create_app

from .conftest import make_settings


async def test_healthz(client):
    resp = await client.get("/healthz")
    assert resp.status == 200
    assert (await resp.json()) == {"status": "ok"}


async def test_readyz_with_workers(client):
    resp = await client.get("/readyz")
    body = await resp.json()
    assert resp.status == 200
    assert body["status"] == "ready" and body["workers"] >= 2


async def test_readyz_without_workers(aiohttp_client, private_redis_url, tmp_path):
    client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
    resp = await client.get("/readyz")
    assert resp.status == 503
    assert (await resp.json())["status"] == "not_ready"
