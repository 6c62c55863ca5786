"""Rate limits: a token bucket (the per-socket message limit, the avatar's per-session speak limit), the per-address
limit on failed key look-ups, and the client address such limits apply to (``ZSYNTH_TRUSTED_PROXIES``)."""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final


class TokenBucket:
    """``rate`` takes a second on average, bursts of up to ``burst``; starts full."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._stamp = time.monotonic()

    def take(self) -> bool:
        """Spend one token if one is there (refilled since the last call); False when the bucket is empty."""
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


class FailureLimiter:
    """Per client address, a token bucket of failures: ``per_min`` a minute, bursts of as many; LRU-bounded.

    Only failures spend from it, so an address is throttled for what it got wrong, never for what it got right.
    """

    def __init__(self, per_min: int, max_clients: int = 10_000) -> None:
        self.per_min = per_min
        self.max_clients = max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens, last refill)

    def _refilled(self, client: str) -> float:
        now = time.monotonic()
        tokens, last = self._buckets.get(client, (float(self.per_min), now))
        tokens = min(float(self.per_min), tokens + (now - last) * self.per_min / 60.0)
        self._buckets[client] = (tokens, now)
        self._buckets.move_to_end(client)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        return tokens

    def exhausted(self, client: str) -> bool:
        """Whether ``client`` has no failure left to spend right now (spends nothing)."""
        return self._refilled(client) < 1.0

    def fail(self, client: str) -> bool:
        """Count one failure of ``client``; False when it had none left (it is over its limit)."""
        tokens = self._refilled(client)
        if tokens < 1.0:
            return False
        self._buckets[client] = (tokens - 1.0, time.monotonic())
        return True


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# An IPv6 client usually holds a whole /64: bucketing by address would let it rotate through 2**64 of them.
IPV6_CLIENT_PREFIX: Final = 64


def _address(text: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _bucket(address: IPAddress) -> str:
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, IPV6_CLIENT_PREFIX), strict=False))
    return str(address)


def address_bucket(text: str, trusted: Sequence[IPNetwork] = ()) -> str | None:
    """What a peer address counts under (an IPv4 address, the /64 of an IPv6 one, an IPv4-mapped one as IPv4); None
    when ``text`` is not an IP address or is one of the ``trusted`` proxies, which stand for many clients."""
    address = _address(text)
    if address is None or any(address in net for net in trusted):
        return None
    return _bucket(address)


def forwarded_client(peer: str | None, forwarded_for: Sequence[str], trusted: Sequence[IPNetwork]) -> IPAddress | None:
    """The client's own address: the peer, or, when the peer is a trusted proxy, the first untrusted hop of
    ``X-Forwarded-For`` counted from the right (each proxy appends the address it was reached from; entries left of
    the first untrusted hop were written by the client and prove nothing). None when the peer is not an IP address.
    """
    current = _address(peer) if peer else None
    if current is None:
        return None
    if any(current in net for net in trusted):
        hops = [hop for value in forwarded_for for hop in value.split(",")]
        for hop in reversed(hops):
            parsed = _address(hop)
            if parsed is None:  # garbage from a trusted hop: charge the proxy that passed it on
                break
            current = parsed
            if not any(current in net for net in trusted):
                break
    return current


def client_address(peer: str | None, forwarded_for: Sequence[str], trusted: Sequence[IPNetwork]) -> str | None:
    """The address limits apply to: :func:`forwarded_client`'s, an IPv6 one as its /64; a peer that is not an IP
    address as it is."""
    if not peer:
        return None
    current = forwarded_client(peer, forwarded_for, trusted)
    return peer if current is None else _bucket(current)
