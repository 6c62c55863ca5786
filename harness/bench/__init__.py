"""Every benchmark of zsynth, run as ``python -m harness.bench NAME [OPTIONS]``.

Each benchmark is one module that gives ``add_arguments(parser)`` (its options, on the one parser of
``__main__``) and ``bench(args)`` (a function or a coroutine): it prints its text report and returns its figures (a
dict, written as JSON by ``--report PATH``), an exit status, or nothing. BENCHMARKS names them, each with the page
of the docs that quotes its figures; ``--list`` prints them. The table imports no benchmark, so that listing one,
or running one on a machine that lacks another's packages (the GPU box), costs nothing of the rest.
"""

from __future__ import annotations

from typing import NamedTuple


class Benchmark(NamedTuple):
    """One benchmark: its command name, its module, what it measures, and the docs that quote its figures."""

    name: str
    module: str
    summary: str
    docs: tuple[str, ...]


def _bench(name: str, summary: str, *docs: str, module: str = "") -> Benchmark:
    return Benchmark(name, module or f"harness.bench.{name.replace('-', '_')}", summary, docs)


BENCHMARKS: tuple[Benchmark, ...] = (
    _bench("auth", "what authentication costs per request: verify() alone and through the middleware", "docs/auth.md"),
    _bench(
        "auth-lockout",
        "whether one address sending made-up keys locks real keys and fresh tokens out",
        "docs/auth.md",
        "docs/limits.md",
    ),
    _bench(
        "avatar", "the avatar server: CPU per live session, sessions a box holds, interrupt latency", "docs/avatar.md"
    ),
    _bench(
        "avatar-offers", "how long a hostile avatar offer (thousands of candidates) stalls the server", "docs/limits.md"
    ),
    _bench(
        "capacity",
        "how many simulated GPU workers one front and one Redis keep busy",
        "docs/scheduling.md",
        "docs/scaling.md",
    ),
    _bench(
        "chaos-soak",
        "mixed load on a Sentinel-managed stack while its parts are killed on a schedule",
        "docs/operations.md",
        "docs/limits.md",
    ),
    _bench(
        "edge", "the edge's figures in one run: every probe of what one client could do to a front", "docs/limits.md"
    ),
    _bench("edge-bodies", "what unknown voice_settings fields cost Redis and the front's loop", "docs/limits.md"),
    _bench("edge-connections", "connections with unfinished headers a front still holds", "docs/limits.md"),
    _bench("edge-uploads", "multipart floods and self-inflating lexicons against a front", "docs/limits.md"),
    _bench(
        "fairness",
        "another key's request while one key floods the realtime sockets",
        "docs/scheduling.md",
        "docs/limits.md",
    ),
    _bench("first-byte", "a short request's first byte, stage by stage", "docs/scaling.md"),
    _bench("first-piece-quality", "word error rate of cut against uncut speech, and the seams", "docs/scaling.md"),
    _bench("flow", "what clients that do not read cost a front, and who else notices", "docs/limits.md"),
    _bench("front-doors", "what TLS and the OpenAI route add to the first byte", "docs/http-api.md"),
    _bench("fuzz-hostile", "the release-length hostile-text fuzz run through a real stack", "docs/limits.md"),
    _bench(
        "gpu-capacity",
        "realtime agent voices per worker: the capacity run (simulated engine on a CPU)",
        "docs/gpu-run.md",
        "docs/gpu-figures.md",
        "docs/scaling.md",
    ),
    _bench(
        "hostile", "the worker-safety figures in one run: what hostile text and clips cost a worker", "docs/limits.md"
    ),
    _bench(
        "loadgen", "a load of requests against a running stack on loopback", "docs/scaling.md", module="harness.load"
    ),
    _bench("mixed", "realtime agents and short requests while long batch jobs run", "docs/scheduling.md"),
    _bench("piper-call", "where a short reply's Piper call goes, timed in-process", "docs/scaling.md"),
    _bench("realtime", "the realtime socket: flush to first audio, and idle and speaking sockets", "docs/realtime.md"),
    _bench("soak", "a bounded run of mixed traffic against two workers, watching for leaks", "docs/limits.md"),
    _bench("speech", "the speech path: engine first chunk against first byte, throughput with 1 and 2 workers"),
    _bench("text", "what text preparation adds to a request: normalization, dictionaries, alignment", "docs/text.md"),
    _bench(
        "text-stage",
        "what hostile text costs: Piper on one long word, normalization, the front's loop",
        "docs/text.md",
        "docs/limits.md",
    ),
    _bench("turbo", "the turbo engine: real-time factor, first audio, tokens per second, memory", "docs/gpu.md"),
    _bench("turbo-streams", "what switching T3 between streams costs, and the memory per stream", "docs/gpu.md"),
    _bench(
        "voice-library",
        "how soon box B speaks a voice cloned on box A, and forgets a removed one",
        "docs/voice-library.md",
    ),
    _bench("voice-safety", "a voice after a forged delete, and bucket clips (bombs, long clips)", "docs/limits.md"),
    _bench("voices", "the CPU engine's cloned voices: pitch following, and what cloning costs", "docs/voices.md"),
    _bench("vs-piper", "Piper's own HTTP server and zsynth side by side, same voice and texts", "docs/scaling.md"),
    _bench("worker-memory", "what one long word costs a Piper worker: RSS growth and time", "docs/limits.md"),
    _bench(
        "ws-contexts", "contexts one multi-stream-input socket starts by looping open, flush, close", "docs/limits.md"
    ),
    _bench("ws-flood", "the front's event loop during a flood of text without white space", "docs/limits.md"),
    _bench(
        "wyoming",
        "wyoming-piper and zsynth's Wyoming listener side by side",
        "docs/home-assistant.md",
        "docs/scaling.md",
    ),
)


def find(name: str) -> Benchmark:
    """The benchmark called ``name`` (``_`` and ``-`` alike)."""
    wanted = name.replace("_", "-")
    for entry in BENCHMARKS:
        if entry.name == wanted:
            return entry
    raise KeyError(name)
