"""Measure what authentication costs per request: verify() alone, and a whole HTTP request through the middleware.

Credential kinds: static key, keys-table key warm (cached) and cold (cache cleared before every call, so each one
reads DynamoDB), ephemeral token warm and cold, and a refused garbage key. The table lives on a moto server this
script starts on loopback (or on --endpoint). Run from the repository root:

    .venv/bin/python -m harness.bench auth [-n 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator

import aiohttp
from aiohttp import web

from zsynth.core.config import Settings
from zsynth.kit.access import authenticator_ctx
from zsynth.kit.errors import error_middleware
from zsynth.kit.middleware import request_id_middleware
from zsynth.services.auth import AUTHENTICATOR, Authenticator, AuthError
from zsynth.services.keys import SETTINGS
from zsynth.services.keystore import KeyStore
from zsynth.speech.access import auth_middleware

STATIC = "bench-static-key"


@contextlib.contextmanager
def moto(endpoint: str | None) -> Iterator[None]:
    """Point the AWS variables at ``endpoint``, or at a moto server started here on loopback."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    if endpoint:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        yield
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            time.sleep(0.1)
        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
        yield
    finally:
        proc.terminate()
        proc.wait(10)


def summary(samples: list[float]) -> str:
    """p50 / p90 / p99 in milliseconds."""
    q = statistics.quantiles(samples, n=100)
    return f"p50 {statistics.median(samples) * 1e3:8.3f} ms   p90 {q[89] * 1e3:8.3f} ms   p99 {q[98] * 1e3:8.3f} ms"


async def timed(n: int, call: Callable[[], Awaitable[object]], before: Callable[[], None] | None = None) -> list[float]:
    """Time ``call`` n times (``before`` runs outside the timing)."""
    out = []
    for _ in range(n):
        if before is not None:
            before()
        t0 = time.perf_counter()
        await call()
        out.append(time.perf_counter() - t0)
    return out


async def ok(request: web.Request) -> web.Response:
    """A handler that does nothing, so the request time is transport plus middleware."""
    return web.Response(text="ok")


def bench_app(settings: Settings) -> web.Application:
    """The speech API's real middlewares and authenticator around a no-op route."""
    app = web.Application(middlewares=[request_id_middleware, error_middleware, auth_middleware])
    app[SETTINGS] = settings
    app.cleanup_ctx.append(authenticator_ctx)
    app.router.add_post("/v1/text-to-speech/{voice_id}", ok)
    return app


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on a free loopback port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/v1/text-to-speech/bench"


async def measure(n: int) -> None:
    """Run every measurement and print one line each."""
    table = f"zsynth-bench-{uuid.uuid4().hex[:8]}"
    store = KeyStore(table)
    await store.open()
    await store.ensure_table()
    await store.close()
    settings = Settings().with_(auth_api_key=STATIC, auth_keys_table=table)

    auth = Authenticator.from_settings(settings)
    await auth.start()
    key, _ = await auth.create_key("bench")
    token, _ = await auth.mint_token(600)

    async def garbage() -> None:
        with contextlib.suppress(AuthError):
            await auth.verify("not-a-key")

    cold = max(50, n // 10)
    print(f"verify() alone ({n} calls warm, {cold} cold; table on {os.environ['AWS_ENDPOINT_URL']})")
    rows = [
        ("static key", await timed(n, lambda: auth.verify(STATIC))),
        ("table key, warm", await timed(n, lambda: auth.verify(key))),
        ("table key, cold", await timed(cold, lambda: auth.verify(key), auth.clear_cache)),
        ("ephemeral token, warm", await timed(n, lambda: auth.verify(token))),
        ("ephemeral token, cold", await timed(cold, lambda: auth.verify(token), auth.clear_cache)),
        ("garbage key (refused)", await timed(n, garbage)),
    ]
    for label, samples in rows:
        print(f"  {label:<24}{summary(samples)}")
    await auth.close()

    print(f"\nwhole HTTP request on loopback through the real middlewares ({n} sequential requests each)")
    open_runner, open_url = await serve(bench_app(Settings()))
    runner, url = await serve(bench_app(settings))
    server_auth = runner.app[AUTHENTICATOR]
    async with aiohttp.ClientSession() as session:

        async def post(target: str, secret: str | None) -> None:
            headers = {"Authorization": f"Bearer {secret}"} if secret else {}
            async with session.post(target, headers=headers) as resp:
                await resp.read()
                assert resp.status == 200, resp.status

        for _ in range(200):  # warm the connection pool and the server
            await post(open_url, None)
            await post(url, key)
        base = await timed(n, lambda: post(open_url, None))
        base_p50 = statistics.median(base)
        print(f"  {'no auth (open server)':<24}{summary(base)}")
        cases = [
            ("static key", STATIC, None, n),
            ("table key, warm", key, None, n),
            ("ephemeral token, warm", token, None, n),
            ("table key, cold", key, server_auth.clear_cache, cold),
            ("ephemeral token, cold", token, server_auth.clear_cache, cold),
        ]
        for label, secret, before, count in cases:
            samples = await timed(count, functools.partial(post, url, secret), before)
            added = (statistics.median(samples) - base_p50) * 1e3
            print(f"  {label:<24}{summary(samples)}   adds {added:+.3f} ms p50")
    await runner.cleanup()
    await open_runner.cleanup()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("-n", type=int, default=2000, help="calls per warm measurement (default 2000)")
    parser.add_argument("--endpoint", help="an existing DynamoDB-compatible endpoint instead of a local moto server")


def bench(args: argparse.Namespace) -> None:
    """Parse the arguments, start moto unless --endpoint names a server, and run the measurements."""
    with moto(args.endpoint):
        try:
            import uvloop

            uvloop.run(measure(args.n))
        except ImportError:
            asyncio.run(measure(args.n))
