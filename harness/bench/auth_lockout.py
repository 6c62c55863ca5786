#!/usr/bin/env python3
"""Whether one address sending made-up keys locks real keys and fresh tokens out of a front, on loopback.

Starts a redis-server, a moto server (DynamoDB) with a keys table holding one minting key and ``--keys`` real full
keys, and one ``zsynth serve`` front using that table (no worker: ``GET /v1/voices`` needs none). Every client is on
127.0.0.1, as every client of a front behind a reverse proxy looks the same unless ``ZSYNTH_TRUSTED_PROXIES`` is set.

1. A flooder sends ``--rate`` made-up ``zsk_live_`` keys a second and keeps going until the front throttles it
   (its first 429), bounded by ``--warmup`` seconds.
2. While the flood goes on, ``--keys`` tokens are minted (``POST /v1/tokens/ephemeral`` with the minting key) and each
   is used once on ``GET /v1/voices``; then each real table key, never used before, is used once.

Prints how many of each were refused, and what the flooder got. Bounded: every request has a 10 s timeout, the flood
stops when the probes end. Usage::

    .venv/bin/python -m harness.bench auth-lockout [--keys 10] [--rate 20]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

from harness.fronts import front_process
from harness.stores import moto_env, moto_server, redis_server
from zsynth.services.auth import Authenticator
from zsynth.services.keystore import KeyStore

ROOT = Path(__file__).resolve().parents[2]

TIMEOUT = aiohttp.ClientTimeout(total=10)


async def make_keys(table: str, count: int) -> tuple[str, list[str]]:
    """Create the table, a minting key and ``count`` real full keys, as `zsynth keys create` does."""
    store = KeyStore(table)
    await store.open()
    try:
        await store.ensure_table()
        auth = Authenticator(store=store)
        minter, _ = await auth.create_key("minter")
        keys = [(await auth.create_key(f"real-{n}"))[0] for n in range(count)]
    finally:
        await store.close()
    return minter, keys


async def flood(session: aiohttp.ClientSession, base: str, rate: float, got: collections.Counter[int]) -> None:
    """Send made-up keys at ``rate`` a second until cancelled; count the statuses."""
    n = 0
    while True:
        n += 1
        headers = {"xi-api-key": f"zsk_live_made-up-{uuid.uuid4().hex}"}
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(f"{base}/v1/voices", headers=headers) as resp:
                await resp.read()
                got[resp.status] += 1
        await asyncio.sleep(1.0 / rate)


async def status_of(session: aiohttp.ClientSession, base: str, secret: str) -> int:
    """The status ``GET /v1/voices`` answers ``secret``."""
    async with session.get(f"{base}/v1/voices", headers={"xi-api-key": secret}) as resp:
        await resp.read()
        return resp.status


async def probe(base: str, minter: str, keys: list[str], rate: float, warmup: float) -> None:
    """Run the flood and the probes; print the table."""
    flooded: collections.Counter[int] = collections.Counter()
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        assert await status_of(session, base, minter) == 200  # the minting key is known (cached) before the flood
        task = asyncio.create_task(flood(session, base, rate, flooded))
        started = time.monotonic()
        while flooded[429] == 0 and time.monotonic() - started < warmup:
            await asyncio.sleep(0.1)
        throttled_after = time.monotonic() - started if flooded[429] else None
        token_statuses: list[int] = []
        for _ in keys:
            async with session.post(
                f"{base}/v1/tokens/ephemeral", json={"ttl_seconds": 60}, headers={"xi-api-key": minter}
            ) as resp:
                assert resp.status == 200, await resp.text()
                token = (await resp.json())["token"]
            token_statuses.append(await status_of(session, base, token))
        key_statuses = [await status_of(session, base, key) for key in keys]
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        flood_s = time.monotonic() - started
    n = len(keys)
    refused_tokens = sum(status != 200 for status in token_statuses)
    refused_keys = sum(status != 200 for status in key_statuses)
    sent = sum(flooded.values())
    print(
        f"one address floods made-up zsk_ keys at ~{rate:g}/s for {flood_s:.1f} s ({sent} sent, {sent / flood_s:.1f}/s)"
    )
    when = f"after {throttled_after:.1f} s" if throttled_after is not None else f"never within {warmup:g} s"
    print(f"  the flooder was first throttled (429) {when}; its answers: {dict(sorted(flooded.items()))}")
    print(f"  {'probe':<62}{'refused':>10}")
    print(f"  {'fresh tokens refused while one address floods made-up keys':<62}{refused_tokens:>7}/{n}")
    print(f"  {'real table keys refused while one address floods made-up keys':<62}{refused_keys:>7}/{n}")
    print(f"  token statuses {token_statuses}")
    print(f"  key statuses   {key_statuses}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--keys", type=int, default=10, help="fresh tokens and real keys probed (default 10 each)")
    parser.add_argument("--rate", type=float, default=20.0, help="made-up keys a second (default 20)")
    parser.add_argument("--warmup", type=float, default=15.0, help="longest flood before probing (default 15 s)")


def bench(args: argparse.Namespace) -> None:
    """Start redis, moto and a front on loopback, run the probe, stop everything."""
    table = f"zsynth-lockout-{uuid.uuid4().hex[:8]}"
    with redis_server() as redis_url, moto_server() as endpoint, tempfile.TemporaryDirectory() as tmp:
        os.environ.update(moto_env(endpoint))
        minter, keys = asyncio.run(make_keys(table, args.keys))
        env = {"ZSYNTH_API_KEYS_TABLE": table, "ZSYNTH_LOG_LEVEL": "WARNING"}
        with front_process(redis_url, Path(tmp), **env) as (_, base):
            asyncio.run(probe(base, minter, keys, args.rate, args.warmup))
