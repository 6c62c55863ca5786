"""Checks on a browser's SDP offer before aiortc sees it: its size, its media sections and its ICE candidates.

aiortc adds remote candidates one by one and checks each against all before it (quadratic: 2,000 candidates
stall the event loop for seconds), then sends STUN checks to every address listed. So an offer is measured and its
candidates counted here, with a cheap line scan bounded by the size cap, and refused before aiortc parses it.
Candidates the server should not contact (loopback, private, link-local, multicast, mDNS names) are then removed
from the SDP; a peer behind such an address still connects, because its own checks reach the server's candidates
and ICE learns its address from them (a peer-reflexive candidate, RFC 8445 section 7.3.1.3).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Final

from zsynth.avatar.errors import AvatarError
from zsynth.core.codes import ApiCode
from zsynth.core.config import Settings

_CANDIDATE: Final = "a=candidate:"
_END_OF_CANDIDATES: Final = "a=end-of-candidates"
_MEDIA: Final = re.compile(r"m=(audio|video) ")
_CANDIDATE_FIELDS: Final = 8  # foundation component transport priority address port "typ" type


@dataclass(frozen=True)
class OfferLimits:
    """How large an offer may be, how many candidates it may list, and which of them the server may contact."""

    max_bytes: int
    max_candidates: int
    allow_private: bool

    @classmethod
    def from_settings(cls, settings: Settings) -> OfferLimits:
        """The limits set by ZSYNTH_AVATAR_MAX_SDP_BYTES, _MAX_REMOTE_CANDIDATES and _ALLOW_PRIVATE_CANDIDATES."""
        return cls(
            settings.avatar.max_sdp_bytes,
            settings.avatar.max_remote_candidates,
            settings.avatar.allow_private_candidates,
        )


@dataclass(frozen=True)
class CheckedOffer:
    """The offer to hand to aiortc, and what happened to the candidates it listed."""

    sdp: str
    kept: int
    dropped: int


def is_public_address(host: str) -> bool:
    """Whether ``host`` is an IP address on the public internet (not loopback, private, shared (CGNAT), link-local,
    unique-local, documentation, reserved, unspecified or multicast); host names, mDNS ``.local`` ones included,
    are not."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def _may_contact(host: str, allow_private: bool) -> bool:
    if is_public_address(host):
        return True
    # Allowed private candidates include mDNS names (aioice resolves those on the local network); other names are
    # never resolved by aioice, so they go either way.
    return allow_private and (_is_ip(host) or host.lower().endswith(".local"))


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _candidate_address(line: str) -> tuple[str, str, int]:
    """(transport, address, port) of an ``a=candidate:`` line, or a 400 when it is malformed."""
    bits = line[len(_CANDIDATE) :].split()
    try:
        if len(bits) < _CANDIDATE_FIELDS or bits[6] != "typ":
            raise ValueError("too few fields")
        int(bits[1])
        int(bits[3])
        port = int(bits[5])
        if not 0 <= port <= 65535:
            raise ValueError("port out of range")
    except ValueError as err:
        raise AvatarError(400, ApiCode.INVALID_SDP, f"Malformed ICE candidate line ({err}): {line[:100]!r}.") from None
    return bits[2].lower(), bits[4].lower(), port


def _check_size(sdp: str, max_bytes: int) -> None:
    # len() of the text is a lower bound of its UTF-8 size: encode only when it might fit.
    if len(sdp) > max_bytes or len(sdp.encode()) > max_bytes:
        raise AvatarError(
            413,
            ApiCode.SDP_TOO_LARGE,
            f"The SDP offer is larger than {max_bytes} bytes (ZSYNTH_AVATAR_MAX_SDP_BYTES); a browser's is a few KiB.",
        )


def _check_media(lines: list[str]) -> None:
    kinds = {match.group(1) for line in lines if (match := _MEDIA.match(line))}
    if kinds != {"audio", "video"}:
        raise AvatarError(400, ApiCode.INVALID_SDP, "The offer must receive one audio and one video track.")


def check_offer(sdp: str, limits: OfferLimits) -> CheckedOffer:
    """The offer as aiortc should see it: at most ``limits.max_bytes`` bytes (else 413 ``sdp_too_large``), one
    audio and one video track (else 400 ``invalid_sdp``), at most ``limits.max_candidates`` distinct candidates
    (else 400 ``too_many_candidates``), and without the candidates the server may not contact.

    When a candidate is removed, so is ``a=end-of-candidates``: ICE then waits for the peer's own checks (bounded by
    ZSYNTH_AVATAR_CONNECT_TIMEOUT) instead of failing at once for want of a candidate to check.
    """
    _check_size(sdp, limits.max_bytes)
    lines = sdp.splitlines()
    _check_media(lines)
    candidates = _count_candidates(lines, limits.max_candidates)
    dropped = {i for i, (_, host, _) in candidates.items() if not _may_contact(host, limits.allow_private)}
    if not dropped:
        return CheckedOffer(sdp, kept=len(candidates), dropped=0)
    kept_lines = [line for i, line in enumerate(lines) if i not in dropped and not line.startswith(_END_OF_CANDIDATES)]
    return CheckedOffer("\r\n".join(kept_lines) + "\r\n", kept=len(candidates) - len(dropped), dropped=len(dropped))


def _count_candidates(lines: list[str], limit: int) -> dict[int, tuple[str, str, int]]:
    """The candidate lines by line number, as (transport, address, port); a 400 at the first distinct candidate over
    ``limit`` (the same candidate listed in several media sections counts once)."""
    candidates: dict[int, tuple[str, str, int]] = {}
    distinct: set[tuple[str, str, int]] = set()
    for i, line in enumerate(lines):
        if not line.startswith(_CANDIDATE):
            continue
        candidates[i] = address = _candidate_address(line)
        distinct.add(address)
        if len(distinct) > limit:
            # Stop here: reading the rest of a flood would only cost more.
            raise AvatarError(
                400,
                ApiCode.TOO_MANY_CANDIDATES,
                f"The offer lists more than {limit} ICE candidates (ZSYNTH_AVATAR_MAX_REMOTE_CANDIDATES).",
            )
    return candidates
