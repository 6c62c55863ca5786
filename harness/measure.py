"""Measuring a running stack: its Prometheus samples."""

from __future__ import annotations

import urllib.request


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
