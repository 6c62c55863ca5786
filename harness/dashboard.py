"""Write zsynth's Grafana dashboard: ``python -m harness.dashboard`` writes systemd/monitoring/zsynth-dashboard.json.

The panels are declared once, here, as (title, unit, queries); tests/test_monitoring_live.py evaluates every query
against a live Prometheus scraping a real front and real workers, and checks the committed JSON is what this makes.
Queries read the job names of the example config (systemd/monitoring/prometheus.yml); ``$__rate_interval`` is
Grafana's own rate window.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final, NamedTuple

OUT: Final = Path(__file__).resolve().parent.parent / "systemd" / "monitoring" / "zsynth-dashboard.json"
RATE: Final = "$__rate_interval"


class Query(NamedTuple):
    """One query of a panel and its legend."""

    expr: str
    legend: str


class Panel(NamedTuple):
    """A time-series panel: its title, its unit (Grafana's unit ids), its queries and what it shows."""

    title: str
    unit: str
    queries: tuple[Query, ...]
    description: str
    gpu: bool = False  # only a GPU engine's workers export it (empty on a CPU fleet)


def quantiles(metric: str, by: str, *qs: float) -> tuple[Query, ...]:
    """The ``qs`` quantiles of a histogram, per ``by`` label."""
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket[{RATE}])))",
            f"p{round(q * 100)} {{{{{by}}}}}",
        )
        for q in qs
    )


PANELS: Final = (
    Panel(
        "Jobs and audio throughput",
        "reqps",
        (
            Query(f"sum by (outcome) (rate(zsynth_jobs_total[{RATE}]))", "jobs/s {{outcome}}"),
            Query(f"sum(rate(zsynth_audio_seconds_total[{RATE}]))", "audio seconds/s delivered"),
            Query(f"sum(rate(zsynth_characters_total[{RATE}]))", "characters/s"),
        ),
        "Jobs the fronts ended per second, by outcome; seconds of audio delivered per wall-clock second.",
    ),
    Panel(
        "Time to first audio (realtime: sockets; batch: HTTP)",
        "s",
        quantiles("zsynth_time_to_first_audio_seconds", "priority", 0.5, 0.95),
        "From submission to the first audio at the front, p50 and p95; realtime segments come from the sockets and "
        "the avatar, batch jobs from the HTTP routes.",
    ),
    Panel(
        "Queue depth",
        "short",
        (
            Query("max(sum by (instance, priority) (zsynth_queue_depth)) by (priority)", "waiting {{priority}}"),
            Query("max(zsynth_queue_resumed)", "batch remainders waiting"),
        ),
        "Jobs waiting in the queue (every front reads the same queue: the largest figure is shown).",
    ),
    Panel(
        "Queue wait (submitted to claimed)",
        "s",
        quantiles("zsynth_worker_queue_wait_seconds", "priority", 0.5, 0.95),
        "How long jobs waited for a worker, as the workers measured it at the claim.",
    ),
    Panel(
        "Workers live and busy",
        "short",
        (
            Query("max(zsynth_workers_live)", "live (fresh heartbeat)"),
            Query("max(zsynth_workers_busy)", "busy"),
            Query('count(up{job="zsynth-worker"} == 1)', "worker endpoints up"),
        ),
        "Workers with a fresh heartbeat, those running a job, and the worker endpoints Prometheus reaches.",
    ),
    Panel(
        "Engine real-time factor and seconds per chunk",
        "short",
        (
            *quantiles("zsynth_worker_real_time_factor", "instance", 0.5),
            Query(
                f"histogram_quantile(0.95, sum by (le) (rate(zsynth_worker_engine_seconds_bucket[{RATE}])))",
                "engine seconds per chunk p95",
            ),
            Query(
                f"histogram_quantile(0.95, sum by (le) (rate(zsynth_worker_first_chunk_seconds_bucket[{RATE}])))",
                "claim to first chunk p95",
            ),
        ),
        "Engine seconds over audio seconds per job (under 1: faster than it plays), per worker; the engine's time "
        "per chunk and from claim to first chunk.",
    ),
    Panel(
        "Worker memory against the ceiling",
        "bytes",
        (
            Query("zsynth_worker_rss_bytes", "RSS {{instance}}"),
            Query("max(zsynth_worker_max_rss_bytes)", "ceiling (ZSYNTH_WORKER_MAX_RSS)"),
            Query(f"sum(increase(zsynth_worker_memory_ceiling_stops_total[{RATE}]))", "jobs stopped at the ceiling"),
        ),
        "Each worker's RSS and the ceiling past which a job is stopped (input_too_complex).",
    ),
    Panel(
        "GPU memory and utilisation",
        "bytes",
        (
            Query("zsynth_worker_gpu_memory_used_bytes", "used {{instance}}"),
            Query("zsynth_worker_gpu_memory_reserved_bytes", "torch reserved {{instance}}"),
            Query("zsynth_worker_gpu_memory_total_bytes", "total {{instance}}"),
            Query("zsynth_worker_gpu_utilization_ratio", "utilisation {{instance}}"),
        ),
        "A GPU engine's device memory (NVML, and torch's allocator) and utilisation; empty on a CPU fleet.",
        gpu=True,
    ),
    Panel(
        "Errors by code",
        "reqps",
        (
            Query(f'sum by (outcome) (rate(zsynth_jobs_total{{outcome!="done"}}[{RATE}]))', "jobs {{outcome}}"),
            Query(f"sum by (status) (rate(zsynth_auth_failures_total[{RATE}]))", "refused credentials {{status}}"),
        ),
        "Jobs that did not end done, by error code; credentials refused, by HTTP status.",
    ),
    Panel(
        "Realtime sockets and avatar sessions",
        "short",
        (
            Query("sum(zsynth_realtime_sockets)", "realtime sockets"),
            Query("sum(zsynth_avatar_sessions)", "avatar sessions"),
        ),
        "Open realtime WebSockets on every front, and live avatar sessions.",
    ),
    Panel(
        "Redis: promotions and reachability",
        "short",
        (
            Query("sum(increase(zsynth_redis_promotions_total[1h]))", "promotions in the last hour"),
            Query('min(zsynth_redis_up{job="zsynth-front"})', "every front reads Redis (1)"),
        ),
        "Sentinel promotions the fronts followed, and whether each front's last read of Redis answered.",
    ),
)


def panel_json(panel: Panel, index: int) -> dict[str, Any]:
    """One Grafana time-series panel, two to a row."""
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [
            {
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "expr": query.expr,
                "legendFormat": query.legend,
                "refId": chr(ord("A") + n),
            }
            for n, query in enumerate(panel.queries)
        ],
    }


def dashboard() -> dict[str, Any]:
    """The whole dashboard (Grafana 9 and later), with a Prometheus data source picked at import."""
    return {
        "uid": "zsynth-fleet",
        "title": "zsynth fleet",
        "description": "zsynth's fronts and workers (docs/operations.md, Monitoring).",
        "tags": ["zsynth"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "timezone": "browser",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": [panel_json(panel, index) for index, panel in enumerate(PANELS)],
    }


def render() -> str:
    """The dashboard's JSON text, as committed."""
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    """Write the dashboard file."""
    OUT.write_text(render())
    print(f"wrote {OUT} ({len(PANELS)} panels)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
