"""SDP offers with chosen ICE candidates, for the avatar server's offer checks (tests and the offer benchmark)."""

from __future__ import annotations

from aiortc import RTCConfiguration, RTCPeerConnection


async def browser_like_offer() -> str:
    """A real aiortc offer that receives one audio and one video track (its peer connection is closed again)."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        pc.addTransceiver("audio", direction="recvonly")
        pc.addTransceiver("video", direction="recvonly")
        await pc.setLocalDescription(await pc.createOffer())
        return str(pc.localDescription.sdp)
    finally:
        await pc.close()


def candidate_line(n: int, host: str, port: int, transport: str = "udp") -> str:
    """One ``a=candidate`` host line."""
    return f"a=candidate:{n:08x} 1 {transport} 2130706431 {host} {port} typ host"


def with_candidates(sdp: str, lines: list[str], *, end_of_candidates: bool = True, first_only: bool = False) -> str:
    """``sdp`` with its own candidates replaced by ``lines`` at the end of every media section (as browsers list
    them), or of the first one only (the one a BUNDLE offer's transport takes its candidates from)."""
    added = [*lines, "a=end-of-candidates"] if end_of_candidates else lines
    out: list[str] = []
    sections = 0
    for line in sdp.splitlines():
        if line.startswith(("a=candidate:", "a=end-of-candidates")):
            continue
        if line.startswith("m="):
            if sections == 1 or (sections > 1 and not first_only):
                out.extend(added)
            sections += 1
        out.append(line)
    if sections == 1 or not first_only:
        out.extend(added)
    return "\r\n".join(out) + "\r\n"


def many_loopback_candidates(count: int, port: int = 9) -> list[str]:
    """``count`` distinct candidates on 127.x addresses: any probe sent to them stays on this host."""
    return [candidate_line(i, f"127.1.{i // 250}.{i % 250 + 1}", port) for i in range(count)]
