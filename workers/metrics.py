"""A worker's own Prometheus endpoint: what the engine does with each job, which only the worker process sees.

The fronts export the queue and what clients get (``zsynth.services.metrics``); each worker exports, on its own port
(``ZSYNTH_WORKER_METRICS_PORT`` plus ``ZSYNTH_WORKER_INDEX``, loopback unless ``ZSYNTH_WORKER_METRICS_HOST`` says
otherwise), its jobs by outcome, the queue wait, the engine's seconds per chunk, the real-time factor, the first
chunk after the claim, the yields, its memory against the ceiling and the voice look-ups; on a GPU engine, the GPU's
memory and utilisation through NVML (``nvidia-ml-py``) where it imports. Every name is listed in
``docs/operations.md`` ("Monitoring").

The worker calls four hooks, one line each: :meth:`WorkerMetrics.claimed`, :meth:`WorkerMetrics.chunks` (around
the engine's chunks, in the engine thread), :meth:`WorkerMetrics.ended` and :meth:`WorkerMetrics.dropped`. A worker
holds several streams at once, so each stream's figures are a :class:`StreamFigures` of its own, made by ``claimed``
and passed back to the other hooks; the loop and the engine thread never touch one stream's figures at the same time
(the loop schedules a stream's chunk and waits for it). :meth:`WorkerMetrics.held` sets how full the worker is. Values
that are state rather than events (RSS, the ceiling, the voice look-ups, the GPU) are read at scrape time.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import Counter as CountBy
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from zsynth.core import protocol
from zsynth.core.config import Settings
from zsynth.core.engines import profile
from zsynth.core.tracing import Tracing

from .engines import Engine, EngineChunk
from .memory import rss_bytes

logger = logging.getLogger(__name__)

_WAIT_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_CHUNK_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0)
_RTF_BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)


@dataclass(slots=True)
class StreamFigures:
    """One stream's figures: when it was claimed (monotonic), its engine seconds and samples so far, its spans."""

    claimed_at: float
    engine_s: float = 0.0
    samples: int = 0
    first_seen: bool = False
    job_span: Any = None
    first_span: Any = None


class WorkerMetrics:
    """Every metric one worker exports, in a registry of its own, and the hooks the worker calls."""

    def __init__(
        self, settings: Settings, engine: Engine, ceiling: Callable[[], int], voice_lookups: CountBy[str] | None = None
    ) -> None:
        self.settings = settings
        self.sample_rate = engine.sample_rate
        self.registry = CollectorRegistry()
        r = self.registry
        info = Gauge(
            "zsynth_worker_info", "This worker's id and engine (always 1).", ["worker_id", "engine"], registry=r
        )
        info.labels(settings.worker.id, engine.name).set(1)
        self.jobs = Counter(
            "zsynth_worker_jobs",
            "Jobs (and remainders of jobs that yielded) this worker ended, by outcome (done, or the error code) and "
            "priority; dropped unrun ones included.",
            ["outcome", "priority"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "zsynth_worker_queue_wait_seconds",
            "From a job's submission (part=first), or its return to the queue after a yield (part=resumed), "
            "to its claim.",
            ["priority", "part"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.engine_seconds = Histogram(
            "zsynth_worker_engine_seconds",
            "Engine time to make one chunk (a sentence on Piper, a streamed piece on Turbo).",
            buckets=_CHUNK_BUCKETS,
            registry=r,
        )
        self.rtf = Histogram(
            "zsynth_worker_real_time_factor",
            "Engine seconds over audio seconds, per job that ended done (per part for a job that yielded).",
            ["priority"],
            buckets=_RTF_BUCKETS,
            registry=r,
        )
        self.first_chunk = Histogram(
            "zsynth_worker_first_chunk_seconds",
            "From a job's claim to its first chunk made (voice load included).",
            ["priority"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.yields = Counter("zsynth_worker_yields", "Batch jobs that gave up this worker's slot midway.", registry=r)
        self.ceiling_stops = Counter(
            "zsynth_worker_memory_ceiling_stops",
            "Jobs stopped because they took the RSS past ZSYNTH_WORKER_MAX_RSS (ended input_too_complex).",
            registry=r,
        )
        self.audio_seconds = Counter("zsynth_worker_audio_seconds", "Seconds of audio this worker made.", registry=r)
        self.busy = Gauge("zsynth_worker_busy", "1 while this worker holds a stream.", registry=r)
        self.streams = Gauge("zsynth_worker_streams", "Streams this worker holds open now.", registry=r)
        self.max_streams = Gauge("zsynth_worker_max_streams", "The most streams this worker holds at once.", registry=r)
        self.full = Gauge(
            "zsynth_worker_full",
            "1 while this worker takes no new stream (its deadline schedule would not stay feasible, or it holds its "
            "most streams).",
            registry=r,
        )
        self.load = Gauge(
            "zsynth_worker_load",
            "The share of the next seconds the slot owes to the streams held (at the measured real-time factor).",
            registry=r,
        )
        # The share of time the slot is held is this counter's rate (the capacity run reads it per level); the gauges
        # above say what the worker holds at the instant of a scrape.
        self.busy_seconds = Counter(
            "zsynth_worker_busy_seconds",
            "Seconds this worker's slot was held: computing, encoding and publishing a chunk of one of its streams.",
            registry=r,
        )
        ProcessCollector(registry=r)  # process_resident_memory_bytes, process_cpu_seconds_total, process_start_time
        r.register(_StateCollector(ceiling, voice_lookups, engine))
        gpu = gpu_collector(settings)
        if gpu is not None:
            r.register(gpu)
        self._server: Any = None
        # Spans of each stream, children of the front's "queued" span (its context rides in Job.trace).
        self.tracing = Tracing.from_settings(settings, "zsynth-worker")

    # ----- the endpoint --------------------------------------------------------------------------------------------

    def serve(self) -> int | None:
        """Serve ``/metrics`` on the configured host and port (plus the worker index); the port, or None when off.

        A port that cannot be bound is logged and the worker serves speech without it: metrics never stop a worker.
        """
        base = self.settings.worker.metrics_port
        if not base:
            return None
        port = base + self.settings.worker.index
        host = self.settings.worker.metrics_host
        try:
            if port > 65535:
                raise OSError(f"port {base} + index {self.settings.worker.index} is past 65535")
            self._server, _ = start_http_server(port, addr=host, registry=self.registry)
        except OSError as err:
            logger.error(
                "worker %s: metrics endpoint on %s:%d not served: %s", self.settings.worker.id, host, port, err
            )
            return None
        logger.info("worker %s: metrics on http://%s:%d/metrics", self.settings.worker.id, host, port)
        return port

    def close(self) -> None:
        """Stop serving (and export the spans still buffered)."""
        if self.tracing is not None:
            self.tracing.shutdown()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ----- the hooks -------------------------------------------------------------------------------------------

    def held(self, streams: int, max_streams: int, full: bool, load: float) -> None:
        """How full the worker is: the streams it holds, its bound, whether it takes more, the slot's load ahead."""
        self.busy.set(1 if streams else 0)
        self.streams.set(streams)
        self.max_streams.set(max_streams)
        self.full.set(1 if full else 0)
        self.load.set(round(load, 4))

    def claimed(self, job: protocol.Job) -> StreamFigures:
        """A job was claimed and will run: its queue wait; its figures start."""
        waited = max(0.0, time.time() - (job.queued_at or job.created_at))
        self.queue_wait.labels(job.priority, "resumed" if job.resumed else "first").observe(waited)
        figures = StreamFigures(claimed_at=time.monotonic())
        if self.tracing is not None and job.trace:
            attributes = {
                "zsynth.job_id": job.job_id,
                "zsynth.worker_id": self.settings.worker.id,
                "zsynth.priority": job.priority,
                "zsynth.part": job.part,
                "zsynth.queue_wait_s": round(waited, 4),
            }
            figures.job_span = self.tracing.start("claimed", attributes, carrier=job.trace)
            figures.first_span = self.tracing.start("first chunk", parent=figures.job_span)
        return figures

    def chunks(self, job: protocol.Job, made: Iterable[EngineChunk], figures: StreamFigures) -> Iterator[EngineChunk]:
        """The engine's chunks, each timed (in the engine thread): engine seconds, and the first chunk's delay."""
        source = iter(made)
        while True:
            started = time.perf_counter()
            began_ns = time.time_ns()
            try:
                chunk = next(source)
            except StopIteration:
                return
            spent = time.perf_counter() - started
            if figures.job_span is not None:
                self._trace_chunk(figures, chunk, began_ns)
            self.engine_seconds.observe(spent)
            figures.engine_s += spent
            figures.samples += len(chunk.pcm)
            if not figures.first_seen:
                figures.first_seen = True
                self.first_chunk.labels(job.priority).observe(time.monotonic() - figures.claimed_at)
            yield chunk

    def _trace_chunk(self, figures: StreamFigures, chunk: EngineChunk, began_ns: int) -> None:
        """The span of one chunk the engine made (a sentence on Piper), and the end of the first-chunk span."""
        assert self.tracing is not None
        audio_s = round(len(chunk.pcm) / self.sample_rate, 3) if self.sample_rate else 0.0
        made = self.tracing.start(
            "sentence",
            {"zsynth.chars": len(chunk.text), "zsynth.audio_s": audio_s},
            parent=figures.job_span,
            start_time=began_ns,
        )
        self.tracing.end(made)
        if figures.first_span is not None:
            self.tracing.end(figures.first_span)
            figures.first_span = None

    def _end_spans(self, figures: StreamFigures, outcome: str, message: str) -> None:
        """End the stream's spans: an error status unless it ended done (or yielded its slot)."""
        assert self.tracing is not None
        if figures.first_span is not None:
            self.tracing.end(figures.first_span)
        figures.job_span.add_event(outcome)
        self.tracing.end(figures.job_span, None if outcome in ("done", "yielded") else outcome, message)
        figures.job_span = figures.first_span = None

    def ended(
        self,
        job: protocol.Job,
        terminal: protocol.Event | None,
        figures: StreamFigures,
        *,
        memory_over: bool = False,
    ) -> None:
        """The claimed job ended with ``terminal``, or yielded its slot (None)."""
        audio_s = figures.samples / self.sample_rate if self.sample_rate else 0.0
        self.audio_seconds.inc(audio_s)
        if terminal is None:
            self.yields.inc()
            outcome = "yielded"
        elif terminal.kind == "done":
            outcome = "done"
        else:
            outcome = str(terminal.meta.get("code") or "error")
        self.jobs.labels(outcome, job.priority).inc()
        if outcome in ("done", "yielded") and audio_s > 0:
            self.rtf.labels(job.priority).observe(figures.engine_s / audio_s)
        if memory_over and outcome == protocol.ErrorCode.INPUT_TOO_COMPLEX:
            self.ceiling_stops.inc()
        if figures.job_span is not None:
            self._end_spans(figures, outcome, str(terminal.meta.get("message", "")) if terminal is not None else "")

    def dropped(self, job: protocol.Job, code: str) -> None:
        """A claimed job was dropped unrun (cancelled, past its deadline, refused): its outcome is ``code``."""
        self.jobs.labels(code, job.priority).inc()
        if self.tracing is not None and job.trace:
            dropped = self.tracing.start("claimed", {"zsynth.job_id": job.job_id}, carrier=job.trace)
            dropped.add_event("dropped unrun")
            self.tracing.end(dropped, code)


class _StateCollector(Collector):
    """What is read at scrape time: RSS and its ceiling, the voice look-ups, the engine's conditioning cache."""

    def __init__(self, ceiling: Callable[[], int], voice_lookups: CountBy[str] | None, engine: object) -> None:
        self._ceiling = ceiling
        self._lookups = voice_lookups
        self._engine = engine

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """The families, from the values as they are now."""
        rss = rss_bytes()
        if rss is not None:
            yield GaugeMetricFamily("zsynth_worker_rss_bytes", "This worker's resident set size.", value=rss)
        yield GaugeMetricFamily(
            "zsynth_worker_max_rss_bytes",
            "The RSS ceiling (ZSYNTH_WORKER_MAX_RSS or the engine's).",
            value=self._ceiling(),
        )
        if self._lookups is not None:
            family = CounterMetricFamily(
                "zsynth_worker_voice_lookups",
                "Voices jobs asked for: builtin, hit (a cloned voice on this box's disk), fetched (from the voice "
                "library first) or missing.",
                labels=["result"],
            )
            for result in ("builtin", "hit", "fetched", "missing"):
                family.add_metric([result], self._lookups.get(result, 0))
            yield family
        cache = getattr(self._engine, "voices", None)
        if cache is not None and hasattr(cache, "hits"):
            family = CounterMetricFamily(
                "zsynth_worker_voice_conditioning",
                "Cloned-voice conditioning the GPU engine needed: from its device cache (memory), from the voice's "
                "saved file (disk), or computed from the clip (computed).",
                labels=["source"],
            )
            for source, attr in (("memory", "hits"), ("disk", "loaded"), ("computed", "built")):
                family.add_metric([source], int(getattr(cache, attr, 0)))
            yield family


# ----- the GPU -----------------------------------------------------------------------------------------------------


def gpu_collector(settings: Settings) -> Collector | None:
    """The GPU collector of a worker whose engine runs on CUDA, when NVML answers; None otherwise (a CPU engine, no
    ``nvidia-ml-py``, no driver): the worker then exports no GPU figures at all."""
    if not profile(settings.engine).runs_on_gpu or settings.turbo.device != "cuda":
        return None
    return NvmlCollector.open(os.environ.get("CUDA_VISIBLE_DEVICES", ""))


class NvmlCollector(Collector):
    """The worker's GPU through NVML: memory used and total, utilisation; torch's reserved and allocated memory
    when torch has CUDA up in this process."""

    def __init__(self, nvml: Any, handle: Any, name: str) -> None:
        self._nvml = nvml
        self._handle = handle
        self._name = name

    @classmethod
    def open(cls, visible: str) -> NvmlCollector | None:
        """The collector of the first GPU ``visible`` (CUDA_VISIBLE_DEVICES: an index or a UUID) names, else None."""
        try:
            import pynvml  # nvidia-ml-py, optional: absent on CPU installs
        except ImportError:
            logger.info("GPU metrics off: nvidia-ml-py is not installed")
            return None
        first = visible.split(",")[0].strip()
        try:
            pynvml.nvmlInit()
            if first.startswith(("GPU-", "MIG-")):
                handle = pynvml.nvmlDeviceGetHandleByUUID(first)
            else:
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
        except pynvml.NVMLError as err:
            logger.info("GPU metrics off: NVML did not answer (%s)", err)
            return None
        return cls(pynvml, handle, uuid.decode() if isinstance(uuid, bytes) else str(uuid))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Memory and utilisation as NVML (and torch's allocator) report them now."""
        nvml = self._nvml
        try:
            memory = nvml.nvmlDeviceGetMemoryInfo(self._handle)
            utilisation = nvml.nvmlDeviceGetUtilizationRates(self._handle)
        except nvml.NVMLError as err:  # a GPU that fell off the bus: the scrape still answers
            logger.warning("GPU metrics: NVML failed: %s", err)
            return
        gauges = (
            (
                "zsynth_worker_gpu_memory_used_bytes",
                "GPU memory in use on the worker's GPU (all processes).",
                memory.used,
            ),
            ("zsynth_worker_gpu_memory_total_bytes", "GPU memory of the worker's GPU.", memory.total),
            (
                "zsynth_worker_gpu_utilization_ratio",
                "Share of the last sample period the GPU was busy (0-1).",
                utilisation.gpu / 100,
            ),
        )
        for name, text, value in (*gauges, *_torch_memory()):
            family = GaugeMetricFamily(name, text, labels=["gpu"])
            family.add_metric([self._name], value)
            yield family


def _torch_memory() -> list[tuple[str, str, float]]:
    """torch's caching allocator on this process's device: reserved and allocated bytes (only when torch is loaded
    and CUDA initialised: a scrape never loads torch)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return []
    return [
        (
            "zsynth_worker_gpu_memory_reserved_bytes",
            "GPU memory torch's allocator holds.",
            torch.cuda.memory_reserved(),
        ),
        ("zsynth_worker_gpu_memory_allocated_bytes", "GPU memory in torch's tensors.", torch.cuda.memory_allocated()),
    ]
