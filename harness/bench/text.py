#!/usr/bin/env python3
"""Benchmark what text preparation adds to a request in the front: normalization, dictionaries, alignment mapping.

One process, no services: the dictionaries are stored in a temporary data directory through the same store the
front uses, read once (as the first request after a change does), and then served from memory as every later
request is. Each figure is the median (and p95) over ``--runs`` requests of a typical agent sentence.

    python -m harness.bench text [--runs 2000] [--rules 100]     (from the repository root)
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from zsynth.core.text.bounds import UNBOUNDED
from zsynth.core.text.dictionaries.rules import Rule
from zsynth.core.text.dictionaries.store import DictionaryStore, DirectoryBackend
from zsynth.core.text.prepare import TextOptions, prepare
from zsynth.core.text.spoken import AlignmentMapper

TEXT = (
    "Your order of 3 items comes to $42.50, and Dr. Patel's office on Main St. can see you on 2024-03-12 at "
    "5:30 pm. Call 555-123-4567 or write to help@example.com; it is 12 km away, about 15% closer than before. "
    "The NASA and ACME teams will confirm it ASAP."
)


def _rules(index: int, count: int) -> list[Rule]:
    rules = [Rule(f"term{index}x{n}", "alias", alias=f"term {index} number {n}") for n in range(count - 2)]
    rules.append(Rule("NASA", "alias", alias="National Aeronautics and Space Administration"))
    rules.append(Rule("acme", "alias", alias="Acme Corporation", case_sensitive=False))
    return rules


async def _timed(runs: int, step: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await step()
        samples.append((time.perf_counter() - started) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--runs", type=int, default=2000, help="requests per figure (at most 20000)")
    parser.add_argument("--rules", type=int, default=100, help="rules in each of the three dictionaries (2-2000)")


async def bench(args: argparse.Namespace) -> None:
    runs = max(10, min(20000, args.runs))
    count = max(2, min(2000, args.rules))
    with tempfile.TemporaryDirectory() as tmp:
        store = DictionaryStore(DirectoryBackend(Path(tmp)))
        made = [await store.create(f"d{i}", None, _rules(i, count), "default") for i in range(3)]
        locators = tuple((d.id, None) for d in made)
        cases = {
            "nothing asked (auto on piper)": TextOptions("auto"),
            "normalization on": TextOptions("on"),
            f"three dictionaries of {count} rules": TextOptions("off", locators),
            "normalization + three dictionaries": TextOptions("on", locators),
        }
        print(f"text: {len(TEXT)} characters; {runs} runs per line; microseconds per request")
        print(f"{'case':44} {'p50':>8} {'p95':>8}")
        for name, options in cases.items():
            # first use reads the versions from storage
            await prepare(TEXT, options, "piper", store, workspace="default", limits=UNBOUNDED)
            p50, p95 = await _timed(
                runs, functools.partial(prepare, TEXT, options, "piper", store, workspace="default", limits=UNBOUNDED)
            )
            print(f"{name:44} {p50:8.0f} {p95:8.0f}")
        spoken = await prepare(TEXT, TextOptions("on", locators), "piper", store, workspace="default", limits=UNBOUNDED)
        chars = list(" ".join(spoken.text.split()))
        times = [float(i) for i in range(len(chars))]

        async def mapping() -> None:
            AlignmentMapper(spoken).feed(chars, times, times, final=True)

        p50, p95 = await _timed(runs, mapping)
        print(f"{'alignment mapped back (with-timestamps)':44} {p50:8.0f} {p95:8.0f}")
        await store.close()
