"""A loopback WebRTC viewer standing in for the browser: it offers, receives the avatar's tracks and records them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp
import aioice.ice
import av
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

# Rows and columns of the mouth in a 512 x 512 frame (see zsynth.avatar.renderers.cpu).
MOUTH_BOX = (slice(294, 371), slice(189, 323))


def loopback_host_addresses(use_ipv4: bool = True, use_ipv6: bool = True) -> list[str]:
    """aioice never offers 127.0.0.1 on its own; on a loopback-only test both peers must use it."""
    return ["127.0.0.1"]


def patch_loopback_ice() -> None:
    """Make aioice gather loopback host candidates (call once per process, before any peer connection)."""
    aioice.ice.get_host_addresses = loopback_host_addresses


@dataclass
class Viewer:
    """Receives audio (48 kHz mono int16 per 20 ms frame) and video (mouth crops) with their arrival times."""

    pc: RTCPeerConnection = field(default_factory=lambda: RTCPeerConnection(RTCConfiguration(iceServers=[])))
    audio: list[tuple[float, np.ndarray]] = field(default_factory=list)
    video: list[tuple[float, np.ndarray]] = field(default_factory=list)
    video_size: tuple[int, int] | None = None
    readers: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pc.on("track", self._on_track)

    async def offer(self) -> dict[str, str]:
        """The browser's offer: receive one audio and one video track."""
        self.pc.addTransceiver("audio", direction="recvonly")
        self.pc.addTransceiver("video", direction="recvonly")
        await self.pc.setLocalDescription(await self.pc.createOffer())
        return {"sdp": self.pc.localDescription.sdp, "type": "offer"}

    async def accept(self, answer: dict[str, str]) -> None:
        """Apply the server's answer."""
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type=answer["type"]))

    def _on_track(self, track: MediaStreamTrack) -> None:
        self.readers.append(asyncio.create_task(self._read(track)))

    async def _read(self, track: MediaStreamTrack) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                now = time.monotonic()
                if track.kind == "audio":
                    assert isinstance(frame, av.AudioFrame)
                    pcm = frame.to_ndarray().reshape(-1)
                    channels = len(frame.layout.channels)
                    self.audio.append((now, pcm[::channels].astype(np.int16)))
                else:
                    assert isinstance(frame, av.VideoFrame)
                    image = frame.to_ndarray(format="rgb24")
                    self.video_size = (image.shape[1], image.shape[0])
                    self.video.append((now, image[MOUTH_BOX].astype(np.float32).mean(axis=2)))

    async def wait_connected(self, timeout: float = 30.0) -> None:
        """Until ICE and DTLS are up."""
        deadline = time.monotonic() + timeout
        while self.pc.connectionState != "connected":
            assert time.monotonic() < deadline, f"peer stayed {self.pc.connectionState}"
            await asyncio.sleep(0.05)

    def audio_between(self, start: float, end: float) -> np.ndarray:
        """Received samples (float -1..1) that arrived between two monotonic times."""
        parts = [pcm for t, pcm in self.audio if start <= t <= end]
        if not parts:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(parts).astype(np.float32) / 32768.0

    def mouth_motion(self, start: float, end: float) -> float:
        """Mean absolute change of the mouth region between consecutive frames in a time window."""
        crops = [c for t, c in self.video if start <= t <= end]
        if len(crops) < 2:
            return 0.0
        return float(np.mean([np.abs(a - b).mean() for a, b in zip(crops, crops[1:], strict=False)]))

    def lip_sync(self, start: float, end: float) -> tuple[float, float]:
        """(lag in ms, correlation) that best lines up mouth opening with loudness in a time window.

        The mouth's opening is its share of dark (open-mouth) pixels; a positive lag means the sound arrives after
        the picture showing it.
        """
        video = [(t, float((crop < 80).mean())) for t, crop in self.video if start <= t <= end]
        audio_t = np.array([t for t, _ in self.audio])
        audio_rms = np.array([float(np.sqrt(np.mean(pcm.astype(np.float32) ** 2))) for _, pcm in self.audio])
        video_t = np.array([t for t, _ in video])
        mouth = np.array([m for _, m in video])
        best = (0.0, -1.0)
        if len(video) < 10 or mouth.std() == 0:
            return best
        for lag_ms in range(-400, 401, 20):
            loud = audio_rms[np.searchsorted(audio_t, video_t + lag_ms / 1000).clip(0, len(audio_t) - 1)]
            if loud.std() > 0:
                corr = float(np.corrcoef(mouth, loud)[0, 1])
                if corr > best[1]:
                    best = (float(lag_ms), corr)
        return best

    async def close(self) -> None:
        """Close the peer connection and wait for the readers to stop."""
        await self.pc.close()
        for task in self.readers:
            task.cancel()
        await asyncio.gather(*self.readers, return_exceptions=True)


class Control:
    """The control socket, with the events it received and when."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.events: list[tuple[float, dict[str, Any]]] = []

    async def next(self, kind: str, timeout: float = 60.0) -> dict[str, Any]:
        """Read until an event of ``kind`` (events read on the way are kept)."""
        for _, event in self.events:
            if event["type"] == kind and not event.get("_seen"):
                event["_seen"] = True
                return event
        deadline = time.monotonic() + timeout
        while True:
            msg = await self.ws.receive(timeout=max(0.1, deadline - time.monotonic()))
            assert msg.type == aiohttp.WSMsgType.TEXT, f"socket ended ({msg.type}) waiting for {kind}: {self.events}"
            event = msg.json()
            self.events.append((time.monotonic(), event))
            if event["type"] == kind:
                event["_seen"] = True
                return cast(dict[str, Any], event)

    def arrival(self, kind: str) -> float:
        return next(t for t, e in self.events if e["type"] == kind)


async def open_session(client: Any, viewer: Viewer, headers: Mapping[str, str], **body: Any) -> tuple[str, Control]:
    """Signal through /connect with ``client`` (aiohttp's test client of the avatar server), attach the control
    socket and wait for session.ready; (session id, its control socket)."""
    resp = await client.post("/connect", json={**(await viewer.offer()), **body}, headers=headers)
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    assert answer["type"] == "answer" and answer["control_url"] == f"/control/{answer['session_id']}"
    await viewer.accept(answer)
    ws = await client.ws_connect(answer["control_url"], headers=headers)
    control = Control(ws)
    await viewer.wait_connected()
    ready = await control.next("session.ready")
    assert ready["session_id"] == answer["session_id"]
    return answer["session_id"], control
