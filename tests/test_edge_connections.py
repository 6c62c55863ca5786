"""Slow and idle connections on a real ``zsynth serve``: the request-header deadline (plain and direct TLS), the idle
keep-alive timeout and the per-address connection cap.

Loopback has a whole /8, so 127.0.0.3 and 127.0.0.4 are two client addresses: a client socket is bound to one of
them before it connects.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from harness.fronts import front_process
from harness.tls_certs import CertAuthority
from zsynth.kit.connections import client_bucket

PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # the blank line that ends the headers never comes
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


async def connect(
    port: int, source: str = "127.0.0.1", context: ssl.SSLContext | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(
        asyncio.open_connection(
            "127.0.0.1", port, local_addr=(source, 0), ssl=context, server_hostname="127.0.0.1" if context else None
        ),
        timeout=10,
    )


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes | None:
    """What the server sent before closing the connection within ``seconds``; None when it is still open then."""
    received = b""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            chunk = await asyncio.wait_for(reader.read(4096), timeout=left)
        except TimeoutError:
            return None
        except (ConnectionResetError, ssl.SSLError):
            return received
        if not chunk:
            return received
        received += chunk
    return None


async def healthz(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """Send a complete request on an open connection; the status line of the answer (its body is read too)."""
    writer.write(HEALTHZ)
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), timeout=10)
    length = 0
    while (line := await asyncio.wait_for(reader.readline(), timeout=10)) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    await asyncio.wait_for(reader.readexactly(length), timeout=10)
    return status


@pytest.fixture
def deadline_front(redis_url: str, tmp_path: Path) -> Iterator[str]:
    """A front whose connections have 1 s for their request headers and 1 s of keep-alive."""
    env = {"ZSYNTH_HEADER_TIMEOUT": "1", "ZSYNTH_KEEPALIVE_TIMEOUT": "1", "ZSYNTH_LOG_LEVEL": "WARNING"}
    with front_process(redis_url, tmp_path, **env) as (_, base):
        yield base


@pytest.mark.heavy
async def test_connections_that_never_finish_their_headers_are_closed_at_the_deadline(deadline_front) -> None:
    port = port_of(deadline_front)
    pairs = await asyncio.gather(*(connect(port, f"127.0.0.{3 + n % 2}") for n in range(200)))
    started = time.monotonic()
    for _, writer in pairs:
        writer.write(PARTIAL)
    # A client that finishes its headers in time is answered meanwhile.
    reader, writer = await connect(port, "127.0.0.5")
    assert (await healthz(reader, writer)).startswith(b"HTTP/1.1 200")
    writer.close()
    outcomes = await asyncio.gather(*(closed_within(reader, 10) for reader, _ in pairs))
    elapsed = time.monotonic() - started
    assert outcomes.count(b"") == 200, f"{sum(o is None for o in outcomes)} of 200 still open after {elapsed:.1f} s"
    assert elapsed >= 0.9, "closed before the deadline: not the header deadline"
    for _, writer in pairs:
        writer.close()


@pytest.mark.heavy
async def test_a_client_that_dribbles_its_headers_is_closed_at_the_deadline(deadline_front) -> None:
    reader, writer = await connect(port_of(deadline_front))
    started = time.monotonic()
    for byte in PARTIAL * 10:  # one byte every 0.1 s: data keeps coming, the headers never end
        if reader.at_eof():
            break
        writer.write(bytes([byte]))
        await asyncio.sleep(0.1)
    assert await closed_within(reader, 5) == b""
    assert time.monotonic() - started < 6


@pytest.mark.heavy
async def test_a_kept_alive_connection_gets_the_deadline_for_its_next_request(redis_url, tmp_path) -> None:
    # Keep-alive far longer than the header deadline: only the deadline can close this connection in time.
    env = {"ZSYNTH_HEADER_TIMEOUT": "1", "ZSYNTH_KEEPALIVE_TIMEOUT": "60", "ZSYNTH_LOG_LEVEL": "WARNING"}
    with front_process(redis_url, tmp_path, **env) as (_, base):
        reader, writer = await connect(port_of(base))
        for _ in range(2):
            assert (await healthz(reader, writer)).startswith(b"HTTP/1.1 200")
        await asyncio.sleep(0.5)  # idle between requests is the keep-alive's business, not the deadline's
        writer.write(PARTIAL)
        started = time.monotonic()
        assert await closed_within(reader, 10) == b""
        assert 0.9 <= time.monotonic() - started < 8


@pytest.mark.heavy
async def test_an_idle_kept_alive_connection_is_closed(deadline_front) -> None:
    reader, writer = await connect(port_of(deadline_front))
    assert (await healthz(reader, writer)).startswith(b"HTTP/1.1 200")
    started = time.monotonic()
    assert await closed_within(reader, 10) == b""
    assert 0.9 <= time.monotonic() - started < 8


@pytest.mark.heavy
async def test_a_quiet_websocket_outlives_both_timeouts(deadline_front) -> None:
    # Inside a handler neither the header deadline nor the keep-alive applies.
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"{deadline_front}/v1/text-to-speech/joe/stream-input", autoping=False) as ws,
    ):
        with pytest.raises(TimeoutError):
            await ws.receive(timeout=3)
        assert not ws.closed


@pytest.mark.heavy
async def test_one_address_is_capped_and_others_are_not(redis_url, tmp_path) -> None:
    env = {"ZSYNTH_MAX_CONNECTIONS_PER_ADDRESS": "5", "ZSYNTH_LOG_LEVEL": "WARNING"}
    with front_process(redis_url, tmp_path, **env) as (_, base):
        port = port_of(base)
        held = [await connect(port, "127.0.0.3") for _ in range(5)]
        reader, _ = await connect(port, "127.0.0.3")
        refused = await closed_within(reader, 5)
        assert refused is not None and refused.startswith(b"HTTP/1.1 503"), refused
        assert b"Too many open connections from this address" in refused
        # Another address is served; the capped one is again once it closes a connection.
        other = await connect(port, "127.0.0.4")
        assert (await healthz(*other)).startswith(b"HTTP/1.1 200")
        held[0][1].close()
        await asyncio.sleep(0.3)
        again = await connect(port, "127.0.0.3")
        assert (await healthz(*again)).startswith(b"HTTP/1.1 200")
        for _, writer in (*held, other, again):
            writer.close()


@pytest.mark.heavy
async def test_a_trusted_proxy_is_not_capped(redis_url, tmp_path) -> None:
    # Behind a reverse proxy every client arrives from the proxy's address: capping it would cap everyone at once.
    env = {
        "ZSYNTH_MAX_CONNECTIONS_PER_ADDRESS": "3",
        "ZSYNTH_TRUSTED_PROXIES": "127.0.0.5",
        "ZSYNTH_LOG_LEVEL": "WARNING",
    }
    with front_process(redis_url, tmp_path, **env) as (_, base):
        port = port_of(base)
        held = [await connect(port, "127.0.0.5") for _ in range(6)]
        assert (await healthz(*held[-1])).startswith(b"HTTP/1.1 200")
        # Any other address is still held to the cap.
        others = [await connect(port, "127.0.0.6") for _ in range(3)]
        reader, _ = await connect(port, "127.0.0.6")
        refused = await closed_within(reader, 5)
        assert refused is not None and refused.startswith(b"HTTP/1.1 503"), refused
        for _, writer in (*held, *others):
            writer.close()


@pytest.fixture(scope="module")
def tls_pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, dict[str, str]]:
    directory = tmp_path_factory.mktemp("edge-tls")
    ca = CertAuthority.create(directory)
    ca.issue(directory / "server.pem", directory / "server.key")
    context = ssl.create_default_context(cafile=str(ca.cert_file))
    env = {"ZSYNTH_TLS_CERT_FILE": str(directory / "server.pem"), "ZSYNTH_TLS_KEY_FILE": str(directory / "server.key")}
    return context, env


@pytest.mark.heavy
async def test_direct_tls_has_the_same_deadline(redis_url, tmp_path, tls_pki) -> None:
    context, tls_env = tls_pki
    env = {"ZSYNTH_HEADER_TIMEOUT": "1", "ZSYNTH_LOG_LEVEL": "WARNING", **tls_env}
    with front_process(redis_url, tmp_path, **env) as (_, base):
        port = port_of(base)
        # A TCP connection that never starts its handshake, and a TLS one that never finishes its headers.
        silent, _ = await connect(port)
        reader, writer = await connect(port, context=context)
        writer.write(PARTIAL)
        outcomes = await asyncio.gather(closed_within(silent, 10), closed_within(reader, 10))
        assert list(outcomes) == [b"", b""], outcomes
        # A client that asks in time is answered.
        reader, writer = await connect(port, context=context)
        assert (await healthz(reader, writer)).startswith(b"HTTP/1.1 200")
        writer.close()


@pytest.mark.unit
def test_connections_are_counted_per_ipv4_address_and_per_ipv6_64() -> None:
    assert client_bucket(("198.51.100.7", 5000)) == "198.51.100.7"
    assert client_bucket(("2001:db8:1:2:aaaa::1", 5000, 0, 0)) == client_bucket(("2001:db8:1:2:ffff::9", 1, 0, 0))
    assert client_bucket(("2001:db8:1:2::1", 5000, 0, 0)) == "2001:db8:1:2::/64"
    assert client_bucket(("2001:db8:1:3::1", 5000, 0, 0)) != client_bucket(("2001:db8:1:2::1", 5000, 0, 0))
    assert client_bucket(("::ffff:198.51.100.7", 5000, 0, 0)) == "198.51.100.7"
    assert client_bucket("/run/zsynth.sock") is None and client_bucket(None) is None
    assert client_bucket(("10.0.0.7", 5000), (ipaddress.ip_network("10.0.0.0/24"),)) is None  # a trusted proxy
