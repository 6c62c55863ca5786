#!/usr/bin/env python3
"""The edge's figures (issue 27), in one run on loopback: every probe of what one client could do to a front.

Runs, one after the other, each probe script (each starts and stops its own redis-server, fronts, workers and moto
on free loopback ports):

* ``bench_edge_uploads.py``: the worst ``/healthz`` stall during 100,000 empty multipart parts; the front memory
  kept after five self-inflating lexicon uploads;
* ``bench_edge_bodies.py``: Redis growth from ten requests carrying 20 MB of unknown voice settings;
* ``bench_auth_lockout.py``: fresh tokens and real keys refused while one address floods made-up keys;
* ``bench_edge_connections.py``: connections with unfinished headers still held after the deadline;
* ``bench_avatar_offers.py``: the avatar ``/healthz`` stall for an offer listing 8,000 candidates;
* ``bench_voice_safety.py``: a voice after one forged ``delete`` on Redis (and the bucket clip figures of issue 26).

Bounded: each probe is bounded itself, and killed after 15 minutes. Usage::

    .venv/bin/python -m harness.bench edge
"""

from __future__ import annotations

import argparse

from harness.probes import Probe, run_probes

PROBES = [
    Probe("edge-uploads", "multipart floods and self-inflating lexicons"),
    Probe("edge-bodies", "unknown voice settings: Redis growth"),
    Probe("auth-lockout", "fresh tokens and real keys while one address floods made-up keys"),
    Probe("edge-connections", "connections that never finish their headers"),
    Probe("avatar-offers", "avatar offers listing 8,000 candidates"),
    Probe("voice-safety", "a voice after a forged delete (and bucket clips)"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark has no options."""


def bench(args: argparse.Namespace) -> int:
    """Run every probe; fail when one did."""
    return 1 if run_probes("zsynth edge figures (issue 27)", PROBES) else 0
