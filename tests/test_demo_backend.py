"""The demo server without a browser: what a page load gets in each auth set-up, the static files, bad uploads."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.base import free_port, make_settings
from zsynth.demo.app import create_demo_app
from zsynth.speech.app import create_app

pytestmark = pytest.mark.stack

KEY = "demo-backend-full-key"


async def test_open_servers_get_no_token(aiohttp_client, redis_url: str, data_dir: Path) -> None:
    settings = make_settings(redis_url, data_dir, http_port=free_port(), avatar_port=free_port())
    client = await aiohttp_client(create_demo_app(settings))
    resp = await client.get("/demo/session")
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    body = await resp.json()
    assert body["mode"] == "open"
    assert body["speech"] == {"token": None} and body["avatar"] == {"token": None}
    assert "ZSYNTH_API_KEY" in body["note"]
    host = client.server.host
    assert body["api_url"] == f"http://{host}:{settings.http.port}"
    assert body["avatar_url"] == f"http://{host}:{settings.avatar.port}"


async def test_page_and_static_files(aiohttp_client, redis_url: str, data_dir: Path) -> None:
    client = await aiohttp_client(create_demo_app(make_settings(redis_url, data_dir)))
    page = await client.get("/")
    assert page.status == 200 and page.content_type == "text/html"
    html = await page.text()
    assert '<script src="/static/app.js">' in html and "http" not in html.replace("http-equiv", "")
    for name, kind in (("app.js", "javascript"), ("style.css", "text/css")):
        resp = await client.get(f"/static/{name}")
        assert resp.status == 200 and kind in resp.content_type
        # Nothing is fetched from outside at run time: no absolute URL in the page's own files.
        assert "https://" not in await resp.text()


async def test_without_a_keys_table_the_key_is_not_handed_out(
    aiohttp_client, aiohttp_server, redis_url: str, data_dir: Path
) -> None:
    front = await aiohttp_server(create_app(make_settings(redis_url, data_dir, auth_api_key=KEY)))
    api_url = str(front.make_url("")).rstrip("/")
    settings = make_settings(
        redis_url, data_dir, auth_api_key=KEY, demo_api_url=api_url, demo_avatar_url=f"http://127.0.0.1:{free_port()}"
    )
    client = await aiohttp_client(create_demo_app(settings))
    resp = await client.get("/demo/session")
    raw = await resp.text()
    assert resp.status == 200 and KEY not in raw
    body = await resp.json()
    assert body["mode"] == "token" and body["api_url"] == api_url
    assert body["speech"]["token"] is None and "keys table" in body["speech"]["error"]
    assert body["avatar"]["token"] is None and "cannot be reached" in body["avatar"]["error"]


async def test_clone_needs_multipart(aiohttp_client, redis_url: str, data_dir: Path) -> None:
    client = await aiohttp_client(create_demo_app(make_settings(redis_url, data_dir)))
    resp = await client.post("/demo/clone", json={"name": "x"})
    assert resp.status == 400
    assert (await resp.json())["detail"]["status"] == "invalid_content_type"
