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

    .venv/bin/python scripts/bench_edge.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.probes import Probe, run_probes  # noqa: E402

PROBES = [
    Probe("bench_edge_uploads.py", "multipart floods and self-inflating lexicons"),
    Probe("bench_edge_bodies.py", "unknown voice settings: Redis growth"),
    Probe("bench_auth_lockout.py", "fresh tokens and real keys while one address floods made-up keys"),
    Probe("bench_edge_connections.py", "connections that never finish their headers"),
    Probe("bench_avatar_offers.py", "avatar offers listing 8,000 candidates"),
    Probe("bench_voice_safety.py", "a voice after a forged delete (and bucket clips)"),
]

if __name__ == "__main__":
    sys.exit(1 if run_probes("zsynth edge figures (issue 27)", PROBES) else 0)
