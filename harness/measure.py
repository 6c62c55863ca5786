"""Measuring a running stack: its Prometheus samples, a process's CPU and resident memory, the worst stall of a
front's event loop (as ``/healthz`` answers show it), the box's load, and percentiles."""

from __future__ import annotations

import asyncio
import os
import time
import urllib.request
from pathlib import Path

import aiohttp


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A Prometheus endpoint's samples, parsed by prometheus_client's own parser: (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample_sum(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(value for (found, have), value in samples.items() if found == name and wanted <= set(have))


def proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds used so far, resident memory in bytes) of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    with open(f"/proc/{pid}/statm") as fh:
        rss_pages = int(fh.read().split()[1])
    return cpu, rss_pages * os.sysconf("SC_PAGE_SIZE")


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def rss_bytes(pid: int) -> int:
    """The resident set size of process ``pid`` (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def rss_mb(pid: int) -> float:
    """A process's resident memory (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


async def poll_health(base: str, stop: asyncio.Event, every_s: float = 0.005) -> float:
    """The worst ``GET /healthz`` answer time (seconds) from now until ``stop`` is set."""
    worst = 0.0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        while not stop.is_set():
            start = time.perf_counter()
            async with session.get(base + "/healthz") as resp:
                await resp.read()
            worst = max(worst, time.perf_counter() - start)
            await asyncio.sleep(every_s)
    return worst


def load_average() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())
