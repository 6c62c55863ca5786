"""TLS on every server: a test CA trusted through SSL_CERT_FILE, real ``zsynth`` processes, unpatched clients.

The official ElevenLabs SDK is given only ``base_url="https://127.0.0.1:<port>"``: its ``convert`` uses https and
its realtime helper derives ``wss://`` from it, as against the cloud. A SIGHUP swaps the certificate for new
handshakes while an open socket keeps talking.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast
from urllib.parse import quote

import httpx
import pytest
from elevenlabs.client import ElevenLabs
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect as ws_connect

from harness.audio import assert_speech, decode_audio
from harness.base import free_port, wait_for
from harness.fronts import front_process, zsynth_process
from harness.tls_certs import CertAuthority

pytestmark = pytest.mark.heavy

KEY = "tls-static-key"
TLS_EXPIRY = "zsynth_tls_certificate_expiry_timestamp_seconds"
TEXT = "Every byte of this sentence travelled through an encrypted connection."


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CertAuthority, Path, Path]]:
    """The CA (trusted by every client in this process through SSL_CERT_FILE), a server cert and its key."""
    directory = tmp_path_factory.mktemp("tls")
    ca = CertAuthority.create(directory)
    cert, key = directory / "server.pem", directory / "server.key"
    ca.issue(cert, key, common_name="first")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SSL_CERT_FILE", str(ca.cert_file))
        yield ca, cert, key


def tls_env(pki) -> dict[str, str]:
    _, cert, key = pki
    return {"ZSYNTH_TLS_CERT_FILE": str(cert), "ZSYNTH_TLS_KEY_FILE": str(key)}


@pytest.fixture(scope="module")
def front(pki, redis_url, data_dir, shared_workers, keys_table):
    """``zsynth serve`` over TLS with a key and the keys table; yields (process, https base URL)."""
    env = {"ZSYNTH_API_KEY": KEY, "ZSYNTH_API_KEYS_TABLE": keys_table, **tls_env(pki)}
    with front_process(redis_url, data_dir, **env) as (proc, base):
        yield proc, base.replace("http://", "https://")


def served_name(base: str) -> str:
    """The common name of the certificate a new handshake gets (verified against the test CA)."""
    port = int(base.rsplit(":", 1)[1])
    context = ssl.create_default_context()
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        cert = tls.getpeercert()
    assert cert is not None
    # typeshed gives all the certificate's fields one union type; "subject" is a tuple of RDNs of (key, value) pairs
    subject = cast("tuple[tuple[tuple[str, str], ...], ...]", cert["subject"])
    return next(value for rdn in subject for key, value in rdn if key == "commonName")


def test_plain_http_is_refused_and_https_verifies(front):
    _, base = front
    assert httpx.get(f"{base}/healthz").status_code == 200
    with pytest.raises(httpx.HTTPError):
        httpx.get(base.replace("https://", "http://") + "/healthz")


def test_sdk_convert_with_only_an_https_base_url(front):
    _, base = front
    sdk = ElevenLabs(base_url=base, api_key=KEY)
    audio = b"".join(sdk.text_to_speech.convert(voice_id="joe", text=TEXT, output_format="mp3_44100_128"))
    assert_speech(*decode_audio(audio, "mp3_44100_128"), TEXT)


def test_sdk_realtime_helper_with_only_an_https_base_url(front):
    _, base = front
    sdk = ElevenLabs(base_url=base, api_key=KEY)
    pieces = ["Every byte of this sentence ", "travelled through ", "an encrypted connection."]
    audio = b"".join(sdk.text_to_speech.convert_realtime(voice_id="joe", text=iter(pieces)))
    assert_speech(*decode_audio(audio, "mp3_44100_128"), TEXT)


def speak(ws) -> bytes:
    """Send TEXT on an open realtime socket (after its first message), end the input; the audio that came back."""
    ws.send(json.dumps({"text": TEXT, "flush": True}))
    ws.send(json.dumps({"text": ""}))
    pcm = b""
    for raw in ws:
        frame = json.loads(raw)
        if frame.get("audio"):
            pcm += base64.b64decode(frame["audio"])
        if frame.get("isFinal"):
            break
    return pcm


def realtime(url: str) -> bytes:
    """A raw client on the realtime socket: one text, flushed; the pcm_16000 audio it got back."""
    with ws_connect(url, open_timeout=10) as ws:
        ws.send(json.dumps({"text": " "}))
        return speak(ws)


def test_raw_wss_client_with_an_ephemeral_token_in_the_query(front):
    _, base = front
    minted = httpx.post(f"{base}/v1/tokens/ephemeral", json={"ttl_seconds": 60}, headers={"xi-api-key": KEY})
    assert minted.status_code == 200, minted.text
    token = minted.json()["token"]
    wss = base.replace("https://", "wss://")
    url = f"{wss}/v1/text-to-speech/joe/stream-input?output_format=pcm_16000&authorization={quote('Bearer ' + token)}"
    assert_speech(*decode_audio(realtime(url), "pcm_16000"), TEXT)


def tls_expiry(base: str) -> float | None:
    """The front's zsynth_tls_certificate_expiry_timestamp_seconds (its one sample), from its /metrics."""
    text = httpx.get(f"{base}/metrics", headers={"xi-api-key": KEY}).text
    found = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == TLS_EXPIRY]
    return found[0] if len(found) == 1 else None


def test_sighup_serves_a_renewed_certificate_and_keeps_open_sockets(front, pki):
    proc, base = front
    ca, cert, key = pki
    assert served_name(base) == "first"
    wss = base.replace("https://", "wss://")
    url = f"{wss}/v1/text-to-speech/joe/stream-input?output_format=pcm_16000"
    with ws_connect(url, additional_headers={"xi-api-key": KEY}, open_timeout=10) as ws:
        ws.send(json.dumps({"text": " "}))
        first_expiry = tls_expiry(base)
        renewed = ca.issue(cert, key, common_name="renewed")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: served_name(base) == "renewed", 10, "the renewed certificate")
        pcm = speak(ws)  # the socket opened under the old certificate still works
    assert_speech(*decode_audio(pcm, "pcm_16000"), TEXT)
    # The front exports the expiry of the certificate it presents, the renewed one's after the reload.
    assert first_expiry is not None and first_expiry > time.time()
    assert tls_expiry(base) == renewed.not_valid_after_utc.timestamp() != first_expiry
    # A broken pair is refused on reload; the server keeps the certificate it has.
    cert.write_text("not a certificate")
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert proc.poll() is None
    assert served_name(base) == "renewed"
    ca.issue(cert, key, common_name="renewed")  # leave a good pair for the other tests


def test_sighup_without_tls_is_ignored(redis_url, data_dir, shared_workers):
    with front_process(redis_url, data_dir) as (proc, base):
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert proc.poll() is None
        assert httpx.get(f"{base}/healthz").status_code == 200


def test_avatar_connect_and_control_socket_over_https(pki, redis_url, data_dir, shared_workers):
    from aiortc import RTCPeerConnection

    port = free_port()
    env = {
        "ZSYNTH_REDIS_URL": redis_url,
        "ZSYNTH_DATA_DIR": str(data_dir),
        "ZSYNTH_AVATAR_PORT": str(port),
        "ZSYNTH_API_KEY": KEY,
        **tls_env(pki),
    }

    async def offer() -> dict[str, str]:
        pc = RTCPeerConnection()
        pc.addTransceiver("audio", direction="recvonly")
        pc.addTransceiver("video", direction="recvonly")
        await pc.setLocalDescription(await pc.createOffer())
        description = {"sdp": pc.localDescription.sdp, "type": "offer"}
        await pc.close()
        return description

    with zsynth_process("avatar", port, env) as (_, http_base):
        base = http_base.replace("http://", "https://")
        resp = httpx.post(f"{base}/connect", json=asyncio.run(offer()), headers={"X-Api-Key": KEY}, timeout=30)
        assert resp.status_code == 200, resp.text
        answer = resp.json()
        assert answer["type"] == "answer" and "m=audio" in answer["sdp"] and "m=video" in answer["sdp"]
        control = base.replace("https://", "wss://") + answer["control_url"]
        with ws_connect(control, additional_headers={"X-Api-Key": KEY}, open_timeout=10) as ws:
            assert ws.protocol.state.name == "OPEN"
            first = json.loads(ws.recv(timeout=10))  # attach sends the session's state first
            assert first["type"] == "session.state", first
            assert first["session_id"] == answer["session_id"], (first, answer)


def test_demo_page_over_https(pki):
    port = free_port()
    env = {"ZSYNTH_DEMO_PORT": str(port), **tls_env(pki)}
    with zsynth_process("demo", port, env) as (_, http_base):
        page = httpx.get(http_base.replace("http://", "https://") + "/")
        assert page.status_code == 200 and "<html" in page.text.lower()


def test_one_file_without_the_other_is_a_settings_error():
    env = {**os.environ, "ZSYNTH_TLS_CERT_FILE": "/nonexistent.pem"}
    env.pop("ZSYNTH_TLS_KEY_FILE", None)
    done = subprocess.run([sys.executable, "-m", "zsynth", "serve"], env=env, capture_output=True, timeout=30)
    assert done.returncode == 2
    assert b"ZSYNTH_TLS_CERT_FILE and ZSYNTH_TLS_KEY_FILE" in done.stderr
