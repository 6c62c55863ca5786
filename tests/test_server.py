"""Server start-up (zsynth.kit.server): a second stop signal during the drain ends it at once."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
import redis
from aiohttp import web

from harness.base import ROOT, free_port, make_settings, wait_for
from zsynth.core import protocol
from zsynth.kit.server import serve_app


def _log_has(path: Path, text: str) -> bool:
    return text in path.read_text(errors="replace")


def _box_announcements(redis_url: str) -> list[bytes | str]:
    """The voice library's box announcements in Redis: a running front has one."""
    client = redis.Redis.from_url(redis_url)
    try:
        return client.keys(protocol.VOICE_BOX_PREFIX + "*")
    finally:
        client.close()


@pytest.mark.heavy
def test_second_signal_during_drain_exits_at_once(private_redis_url, data_dir, tmp_path):
    port = free_port()
    log = tmp_path / "front.log"
    env = {
        **os.environ,
        "ZSYNTH_REDIS_URL": private_redis_url,
        "ZSYNTH_PORT": str(port),
        "ZSYNTH_DATA_DIR": str(data_dir),
        "ZSYNTH_DRAIN_TIMEOUT": "120",  # far longer than the test: only the second signal can end this drain
        "ZSYNTH_LOG_JSON": "false",
    }
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "zsynth", "serve"], env=env, cwd=ROOT, stderr=out, stdout=out)
    try:
        listening = f"front listening on http://127.0.0.1:{port}"
        wait_for(lambda: proc.poll() is not None or _log_has(log, listening), 60, "zsynth serve")
        assert proc.poll() is None, log.read_text()
        assert _box_announcements(private_redis_url), "the front announces its box while it runs"
        # An upload still coming in: the handler waits for the rest of the body, so the drain waits for it.
        upload = socket.create_connection(("127.0.0.1", port), timeout=5)
        body = b'{"text": "A request whose body is still on its way."}'
        upload.sendall(
            b"POST /v1/text-to-speech/v/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body[:10]
        )
        time.sleep(0.3)  # let the front start the handler
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: _log_has(log, "draining"), 10, "the drain to start")
        time.sleep(1.0)
        assert proc.poll() is None, "the open upload holds the drain"
        with_second = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
        elapsed = time.monotonic() - with_second
        text = log.read_text()
        assert proc.returncode == 0, text
        assert elapsed < 5, f"exited {elapsed:.1f}s after the second signal"
        assert "second stop signal (SIGINT) during the drain" in text, text
        assert "stopped before its drain finished" in text, text
        assert "Traceback" not in text, text
        # The cleanup contexts still ran, in order: the voice library took the box's announcement out of Redis, so
        # the other fronts see it leave now rather than when the announcement expires.
        assert _box_announcements(private_redis_url) == []
        # The held request was cut, not answered.
        upload.settimeout(5)
        assert upload.recv(4096) == b""
        upload.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.stack
async def test_a_second_signal_cancels_the_requests_then_runs_the_cleanup_contexts_in_order(tmp_path, caplog):
    """The forced end still closes what the app opened, newest first and after the requests are gone: left to the
    event loop's shutdown, the cleanup contexts' generators would be finalized all at once, in no order."""
    events: list[str] = []
    started = asyncio.Event()

    def context(name: str):
        async def ctx(app: web.Application):
            events.append(f"{name} opened")
            yield
            await asyncio.sleep(0.05)  # a close that waits on something, like closing a Redis client
            events.append(f"{name} closed")

        return ctx

    async def held(request: web.Request) -> web.Response:
        started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            events.append("request cancelled")
        return web.Response()

    app = web.Application()
    app.cleanup_ctx.extend([context("outer"), context("inner")])
    app.router.add_get("/held", held)
    port = free_port()
    settings = make_settings("redis://127.0.0.1:1/0", tmp_path, http_port=port, http_drain_timeout_s=120.0)
    caplog.set_level("INFO", logger="zsynth.kit.server")
    served = asyncio.create_task(serve_app(app, settings, port, "test"))
    # The line comes once the port listens and the stop signals are the server's, not pytest's.
    for _ in range(200):
        if "test listening on" in caplog.text:
            break
        await asyncio.sleep(0.05)
    async with aiohttp.ClientSession() as session:
        request = asyncio.create_task(session.get(f"http://127.0.0.1:{port}/held"))
        await asyncio.wait_for(started.wait(), 10)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(0.5)
        assert not served.done(), "the held request holds the drain"
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.wait_for(served, 5)
        # The request was cut: its client sees the connection close, not an answer.
        with pytest.raises(aiohttp.ClientError):
            await asyncio.wait_for(request, 5)
    assert events == ["outer opened", "inner opened", "request cancelled", "inner closed", "outer closed"]
