"""Hostile ``POST /connect`` offers: size and candidate caps on a real avatar server process, and private candidates
that the server must not contact (a loopback viewer and a UDP listener standing in for a private host)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from harness import avatar as avatar_peer
from harness.avatar import Viewer
from harness.base import free_port, make_settings
from harness.fronts import zsynth_process
from harness.offer_sdp import browser_like_offer, candidate_line, many_loopback_candidates, with_candidates
from zsynth.avatar.app import create_avatar_app
from zsynth.avatar.errors import AvatarError
from zsynth.avatar.sdp import OfferLimits, check_offer, is_public_address
from zsynth.avatar.sessions import AVATAR_SESSIONS

KEY = "avatar-offers-key"
HEADERS = {"X-Api-Key": KEY}
FLOOD = 8000  # the candidates of the offer that stalled the server for seconds
STALL_BOUND_S = 1.0  # loose, against a loaded test machine; harness/bench/avatar_offers.py reports the real figure
STUN_COOKIE = 0x2112A442


def server_env(redis_url: str, data_dir: Path, port: int, **extra: str) -> dict[str, str]:
    return {
        "ZSYNTH_HOST": "127.0.0.1",
        "ZSYNTH_AVATAR_PORT": str(port),
        "ZSYNTH_REDIS_URL": redis_url,
        "ZSYNTH_DATA_DIR": str(data_dir),
        "ZSYNTH_API_KEYS": KEY,
        "ZSYNTH_LOG_LEVEL": "WARNING",
        **extra,
    }


@pytest.fixture(scope="module")
def avatar_url(redis_url: str, data_dir: Path) -> Iterator[str]:
    """A real ``zsynth avatar`` process with the default offer limits."""
    port = free_port()
    with zsynth_process("avatar", port, server_env(redis_url, data_dir, port)) as (_, base):
        yield base


@pytest.fixture(scope="module")
def raised_sdp_cap_url(redis_url: str, data_dir: Path) -> Iterator[str]:
    """A real ``zsynth avatar`` process whose SDP cap (1 MiB) and JSON body limit (2 MiB) let an 8,000-candidate
    offer through to the count."""
    port = free_port()
    raised = {"ZSYNTH_AVATAR_MAX_SDP_BYTES": str(1 << 20), "ZSYNTH_MAX_JSON_BODY_BYTES": str(2 << 20)}
    env = server_env(redis_url, data_dir, port, **raised)
    with zsynth_process("avatar", port, env) as (_, base):
        yield base


async def post_offer_watching_health(base: str, sdp: str) -> tuple[int, dict, float, float]:
    """POST /connect while another connection asks /healthz back to back: (status, body, /connect seconds, worst
    /healthz seconds)."""
    timeout = aiohttp.ClientTimeout(total=15)
    async with aiohttp.ClientSession(timeout=timeout) as http, aiohttp.ClientSession(timeout=timeout) as probe:
        async with probe.get(base + "/healthz") as resp:
            assert resp.status == 200

        async def offer() -> tuple[int, dict, float]:
            start = time.perf_counter()
            async with http.post(base + "/connect", json={"sdp": sdp, "type": "offer"}, headers=HEADERS) as resp:
                return resp.status, await resp.json(), time.perf_counter() - start

        task = asyncio.create_task(offer())
        worst = 0.0
        while not task.done():
            start = time.perf_counter()
            async with probe.get(base + "/healthz") as resp:
                assert resp.status == 200
            worst = max(worst, time.perf_counter() - start)
        status, body, took = await task
    return status, body, took, worst


@pytest.mark.heavy
async def test_an_offer_listing_8000_candidates_is_refused_at_once_and_health_answers(avatar_url) -> None:
    sdp = with_candidates(await browser_like_offer(), many_loopback_candidates(FLOOD), first_only=True)
    status, body, took, worst = await post_offer_watching_health(avatar_url, sdp)
    # 489 KiB: past the JSON body limit (256 KiB) too, which refuses it before it is parsed.
    assert status == 413 and body["code"] in ("request_too_large", "sdp_too_large"), body
    assert took < STALL_BOUND_S and worst < STALL_BOUND_S, (took, worst)


@pytest.mark.heavy
async def test_the_candidate_cap_holds_when_the_size_cap_lets_8000_through(raised_sdp_cap_url) -> None:
    sdp = with_candidates(await browser_like_offer(), many_loopback_candidates(FLOOD), first_only=True)
    status, body, took, worst = await post_offer_watching_health(raised_sdp_cap_url, sdp)
    assert (status, body["code"]) == (400, "too_many_candidates"), body
    assert "lists more than 16 ICE candidates" in body["message"]
    assert took < STALL_BOUND_S and worst < STALL_BOUND_S, (took, worst)


@pytest.mark.heavy
async def test_an_oversized_offer_is_413_and_a_browser_sized_one_is_answered(avatar_url) -> None:
    offer = with_candidates(await browser_like_offer(), [candidate_line(1, "127.0.0.1", 9)])
    padded = offer + "".join(f"a=x-padding:{n:05d} {'x' * 60}\r\n" for n in range(600))  # ~ 44 KiB
    async with aiohttp.ClientSession() as http:
        async with http.post(avatar_url + "/connect", json={"sdp": padded}, headers=HEADERS) as resp:
            assert resp.status == 413
            body = await resp.json()
        assert body["code"] == "sdp_too_large" and set(body) == {"code", "message"}
        async with http.post(avatar_url + "/connect", json={"sdp": offer}, headers=HEADERS) as resp:
            assert resp.status == 200, await resp.text()
            session_id = (await resp.json())["session_id"]
        async with http.delete(f"{avatar_url}/v1/sessions/{session_id}", headers=HEADERS) as resp:
            assert resp.status == 200


@pytest.mark.heavy
@pytest.mark.parametrize(("count", "status"), [(16, 200), (17, 400)])
async def test_at_most_16_candidates_are_taken(avatar_url, count: int, status: int) -> None:
    # The same candidates in both media sections (as browsers list them) count once.
    sdp = with_candidates(await browser_like_offer(), many_loopback_candidates(count))
    async with aiohttp.ClientSession() as http:
        async with http.post(avatar_url + "/connect", json={"sdp": sdp}, headers=HEADERS) as resp:
            body = await resp.json()
            assert resp.status == status, body
        if status == 200:
            async with http.delete(f"{avatar_url}/v1/sessions/{body['session_id']}", headers=HEADERS):
                pass
        else:
            assert body["code"] == "too_many_candidates"


@pytest.mark.heavy
async def test_a_malformed_candidate_line_is_400(avatar_url) -> None:
    sdp = with_candidates(await browser_like_offer(), ["a=candidate:1 1 udp 2130706431 127.0.0.1"])
    async with aiohttp.ClientSession() as http:
        async with http.post(avatar_url + "/connect", json={"sdp": sdp}, headers=HEADERS) as resp:
            assert resp.status == 400
            assert (await resp.json())["code"] == "invalid_sdp"


@pytest.mark.heavy
async def test_an_offer_that_trips_aiortcs_own_checks_is_400(avatar_url) -> None:
    # aiortc asserts that an RTP payload type fits in 0..255: a 500 with a traceback before.
    sdp = (await browser_like_offer()).replace("a=rtpmap:", "a=rtpmap:300 opus/48000/2\r\na=rtpmap:", 1)
    sdp = re.sub(r"(m=audio \d+ UDP/TLS/RTP/SAVPF) ", r"\1 300 ", sdp, count=1)
    async with aiohttp.ClientSession() as http:
        async with http.post(avatar_url + "/connect", json={"sdp": sdp}, headers=HEADERS) as resp:
            assert resp.status == 400, await resp.text()
            assert (await resp.json())["code"] == "invalid_sdp"


# -- private candidates, in-process: both peers use loopback, so the server's checks can reach 127.0.0.2 ------------


@contextlib.contextmanager
def udp_listener(host: str) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, 0))
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


async def stun_requests_received(sock: socket.socket, seconds: float) -> int:
    """STUN binding requests arriving at ``sock`` within ``seconds``."""
    loop = asyncio.get_running_loop()
    count = 0
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            packet = await asyncio.wait_for(loop.sock_recv(sock, 2048), left)
        except TimeoutError:
            break
        if len(packet) >= 20 and struct.unpack("!HHI", packet[:8])[::2] == (0x0001, STUN_COOKIE):
            count += 1
    return count


@pytest.fixture
async def in_process(aiohttp_client, redis_url, data_dir, loopback_ice) -> AsyncIterator:
    """Make an in-process avatar server (real app factory, real aiortc) with settings overrides."""

    async def make(**overrides: object):
        settings = make_settings(redis_url, data_dir, auth_api_keys=(KEY,), avatar_connect_timeout_s=30.0, **overrides)
        return await aiohttp_client(create_avatar_app(settings))

    yield make


@pytest.mark.stack
@pytest.mark.parametrize(("allow", "contacted"), [(False, False), (True, True)])
async def test_a_private_candidate_is_contacted_only_when_allowed(in_process, allow: bool, contacted: bool) -> None:
    client = await in_process(avatar_allow_private_candidates=allow)
    with udp_listener("127.0.0.2") as sock:
        port = sock.getsockname()[1]
        sdp = with_candidates(await browser_like_offer(), [candidate_line(1, "127.0.0.2", port)])
        resp = await client.post("/connect", json={"sdp": sdp}, headers=HEADERS)
        assert resp.status == 200, await resp.text()
        received = await stun_requests_received(sock, 3.0)
    # Allowed, the server checks the listed address within a second or two; the control shows the listener hears it.
    assert (received > 0) is contacted, received
    session_id = (await resp.json())["session_id"]
    await client.app[AVATAR_SESSIONS].get(session_id, "default").close("test_over")


@pytest.mark.stack
async def test_a_peer_offering_only_private_candidates_still_connects(in_process) -> None:
    client = await in_process()  # private candidates dropped: the viewer offers only 127.0.0.1
    viewer = Viewer()
    try:
        session_id, control = await avatar_peer.open_session(client, viewer, HEADERS)
        assert client.app[AVATAR_SESSIONS].get(session_id, "default").state == "connected"
        await control.ws.close()
    finally:
        await viewer.close()


# -- the offer check itself ----------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("host", "public"),
    [
        ("8.8.8.8", True),
        ("2001:4860:4860::8888", True),
        ("127.0.0.1", False),
        ("::1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.10", False),
        ("100.64.0.1", False),
        ("169.254.1.1", False),
        ("fe80::1", False),
        ("fd00::2", False),
        ("0.0.0.0", False),
        ("::", False),
        ("224.0.0.251", False),
        ("ff02::fb", False),
        ("::ffff:10.0.0.1", False),
        ("0a1b2c3d-1111-2222-3333-444455556666.local", False),
        ("example.com", False),
    ],
)
def test_public_addresses(host: str, public: bool) -> None:
    assert is_public_address(host) is public


def sample_sdp(*candidates: str) -> str:
    media = "m={kind} 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=mid:{mid}\r\n" + "".join(
        f"a=candidate:{line}\r\n" for line in candidates
    )
    end = "a=end-of-candidates\r\n"
    return "v=0\r\ns=-\r\n" + media.format(kind="audio", mid=0) + end + media.format(kind="video", mid=1) + end


@pytest.mark.unit
def test_dropping_a_candidate_drops_end_of_candidates_too() -> None:
    public = "1 1 udp 2130706431 8.8.8.8 5000 typ host"
    mdns = "2 1 udp 2130706431 0a1b2c3d-1111-2222-3333-444455556666.local 5001 typ host"
    sdp = sample_sdp(public, mdns)
    checked = check_offer(sdp, OfferLimits(max_bytes=4096, max_candidates=2, allow_private=False))
    assert (checked.kept, checked.dropped) == (2, 2)
    assert checked.sdp.count("8.8.8.8") == 2 and ".local" not in checked.sdp and "end-of-candidates" not in checked.sdp
    allowed = check_offer(sdp, OfferLimits(max_bytes=4096, max_candidates=2, allow_private=True))
    assert allowed.sdp == sdp and allowed.dropped == 0


@pytest.mark.unit
def test_the_offer_must_receive_audio_and_video() -> None:
    limits = OfferLimits(max_bytes=4096, max_candidates=16, allow_private=False)
    for sdp in (sample_sdp().replace("m=video", "m=text"), sample_sdp().replace("m=audio", "m=video")):
        with pytest.raises(AvatarError, match="one audio and one video") as caught:
            check_offer(sdp, limits)
        assert caught.value.http_status == 400
