#!/usr/bin/env python3
"""How long a hostile ``POST /connect`` offer stalls the avatar server, and whether it makes the server probe
addresses the offer lists, on loopback.

Starts a redis-server and a real ``zsynth avatar`` process (defaults, except a static key), then:

* sends an offer (a real aiortc offer) listing 8,000 ICE candidates, while a second client asks ``GET /healthz``
  back to back; the stall is the slowest ``/healthz`` answer while ``/connect`` is in flight;
* the same against a second avatar server whose SDP size cap is raised to 1 MiB, so the candidate cap alone
  has to hold (this row means nothing on code without the caps: that server then behaves like the first);
* an offer listing 16 candidates (the default cap) to the second server, which also allows private candidates,
  so aiortc takes all 16: what an accepted offer costs the loop;
* sends an offer whose only candidate is a UDP listener on 127.0.0.2 and counts the STUN packets it receives in
  the next few seconds (the server should not probe a private address unless told to), on both servers.

The 8,000 candidates are on 127.x addresses, so whatever the server sends to them stays on this host. Bounded: one
offer per case, a 60 s timeout each (``--timeout-s``). Usage::

    .venv/bin/python -m harness.bench avatar-offers [--candidates 8000] [--listen-s 3]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from harness.base import free_port
from harness.fronts import zsynth_process
from harness.offer_sdp import browser_like_offer, candidate_line, many_loopback_candidates, with_candidates
from harness.stores import redis_server

ROOT = Path(__file__).resolve().parents[2]

KEY = "bench-avatar-offers-key"
HEADERS = {"X-Api-Key": KEY}
TIMEOUT = aiohttp.ClientTimeout(total=60)


async def healthz_p50(base: str, count: int = 30) -> float:
    """Median ``/healthz`` time on a quiet server (seconds)."""
    samples = []
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        for _ in range(count):
            start = time.perf_counter()
            async with http.get(base + "/healthz") as resp:
                assert resp.status == 200
            samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def stall_during_connect(base: str, sdp: str, timeout_s: float) -> tuple[float, float, int, str]:
    """(worst /healthz seconds while /connect runs, /connect seconds, its status, its error code or session id);
    status 0 when /connect did not answer within ``timeout_s`` (the stall is then at least that long)."""
    limit = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=limit) as http, aiohttp.ClientSession(timeout=limit) as probe:
        async with probe.get(base + "/healthz") as resp:  # the probe's connection is open before the offer goes
            assert resp.status == 200

        async def offer() -> tuple[float, int, str]:
            start = time.perf_counter()
            async with http.post(base + "/connect", json={"sdp": sdp, "type": "offer"}, headers=HEADERS) as resp:
                body = await resp.json()
                took = time.perf_counter() - start
                if resp.status == 200:
                    # End the session at once, so its checks stop and the next case starts clean.
                    async with http.delete(f"{base}/v1/sessions/{body['session_id']}", headers=HEADERS):
                        pass
                    return took, resp.status, "session " + body["session_id"][:6]
                return took, resp.status, str(body.get("code"))

        task = asyncio.create_task(offer())
        worst = 0.0
        try:
            while not task.done():
                start = time.perf_counter()
                async with probe.get(base + "/healthz") as resp:
                    assert resp.status == 200
                worst = max(worst, time.perf_counter() - start)
            took, status, what = await task
        except TimeoutError:
            task.cancel()
            return timeout_s, timeout_s, 0, f"no answer in {timeout_s:g} s"
    return worst, took, status, what


async def probes_to_listed_address(base: str, listen_s: float) -> tuple[int, int]:
    """(STUN packets a UDP listener on 127.0.0.2 got after being listed as the offer's only candidate, status)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.2", 0))
    sock.setblocking(False)
    port = sock.getsockname()[1]
    sdp = with_candidates(await browser_like_offer(), [candidate_line(1, "127.0.0.2", port)])
    packets = 0
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
            async with http.post(base + "/connect", json={"sdp": sdp, "type": "offer"}, headers=HEADERS) as resp:
                status = resp.status
                body = await resp.json()
            deadline = time.monotonic() + listen_s
            loop = asyncio.get_running_loop()
            while (left := deadline - time.monotonic()) > 0:
                try:
                    await asyncio.wait_for(loop.sock_recv(sock, 2048), left)
                    packets += 1
                except TimeoutError:
                    break
            if status == 200:
                async with http.delete(f"{base}/v1/sessions/{body['session_id']}", headers=HEADERS):
                    pass
    finally:
        sock.close()
    return packets, status


async def run(strict: str, raised: str, candidates: int, listen_s: float, timeout_s: float) -> None:
    offer = await browser_like_offer()
    flood = with_candidates(offer, many_loopback_candidates(candidates), first_only=True)
    quiet = await healthz_p50(strict)
    at_cap = with_candidates(offer, many_loopback_candidates(16), first_only=True)
    rows = []
    for label, base in (("default caps", strict), ("SDP cap raised to 1 MiB", raised)):
        worst, took, status, what = await stall_during_connect(base, flood, timeout_s)
        rows.append((label, worst, took, status, what))
    accepted = await stall_during_connect(raised, at_cap, timeout_s)
    packets, probe_status = await probes_to_listed_address(strict, listen_s)
    allowed_packets, _ = await probes_to_listed_address(raised, listen_s)
    kib = len(flood.encode()) / 1024
    print(f"avatar server on loopback; /healthz p50 on a quiet server {quiet * 1e3:.1f} ms")
    print(f"offer with {candidates:,} candidates in its first media section ({kib:,.0f} KiB of SDP):")
    for label, worst, took, status, what in rows:
        print(f"  {label:<26} /healthz stall {worst * 1e3:8.1f} ms   /connect {took * 1e3:8.1f} ms -> {status} {what}")
    worst, took, status, what = accepted
    print("offer with 16 candidates (the default cap), all kept (private candidates allowed), answered:")
    print(f"  {'':<26} /healthz stall {worst * 1e3:8.1f} ms   /connect {took * 1e3:8.1f} ms -> {status} {what}")
    print(
        f"offer listing one private address (127.0.0.2) -> {probe_status}: {packets} STUN packets to it in "
        f"{listen_s:g} s ({allowed_packets} where private candidates are allowed)"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--candidates", type=int, default=8000, help="candidates in the flood offer (default 8000)")
    parser.add_argument("--listen-s", type=float, default=3.0, help="how long to count STUN packets (default 3)")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="longest wait for /connect (default 60)")


def bench(args: argparse.Namespace) -> None:
    with redis_server() as redis_url, tempfile.TemporaryDirectory() as tmp:
        env = {
            "ZSYNTH_HOST": "127.0.0.1",
            "ZSYNTH_REDIS_URL": redis_url,
            "ZSYNTH_DATA_DIR": tmp,
            "ZSYNTH_API_KEYS": KEY,
            "ZSYNTH_LOG_LEVEL": "WARNING",
        }
        strict_port, raised_port = free_port(), free_port()
        raised_env = {
            **env,
            "ZSYNTH_AVATAR_PORT": str(raised_port),
            "ZSYNTH_AVATAR_MAX_SDP_BYTES": str(1 << 20),
            "ZSYNTH_MAX_JSON_BODY_BYTES": str(2 << 20),  # the 489 KiB offer must get past the body limit too
            "ZSYNTH_AVATAR_ALLOW_PRIVATE_CANDIDATES": "true",
        }
        with (
            zsynth_process("avatar", strict_port, {**env, "ZSYNTH_AVATAR_PORT": str(strict_port)}) as (_, strict),
            zsynth_process("avatar", raised_port, raised_env) as (_, raised),
        ):
            asyncio.run(run(strict, raised, args.candidates, args.listen_s, args.timeout_s))
