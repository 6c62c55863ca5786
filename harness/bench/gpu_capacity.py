"""Realtime agent voices per GPU: the accounting of the capacity run (underruns, first audio, the figure).

A realtime agent socket speaks turns of sentences; each turn's audio plays back continuously from its first chunk.
A chunk *underruns* when it arrives after the playback reached the point where it starts (the listener hears a gap).
Per number of concurrent sockets N, the run records every stream's underruns and every turn's first audio (from the
turn's first text to its first audio chunk). The capacity figure is the largest N whose streams had no underrun and
whose first-audio p95 is at most :data:`FIRST_AUDIO_P95_S`.

The run (``python -m harness.bench gpu-capacity``) starts Redis, one worker and one front, then for each N in
``--levels`` runs N agent sockets at once (:func:`agent`): stream-input with ``auto_mode``, each turn's sentences sent
one ahead of the playback, the next turn after the playback ends. ``--engine simulated --rtf R`` runs it on the
simulated engine (load tests only), whose worker holds ``R * chunk`` seconds per chunk; ``--engine turbo`` on the
GPU engine with the checkpoint in ``ZSYNTH_TURBO_CHECKPOINT``.

``--mode conversation`` runs instead N voice agents on ``multi-stream-input`` sockets as LiveKit's ElevenLabs plugin
drives them (:func:`converse`: a context per turn of 1-2 sentences, played behind a 150 ms jitter buffer, then the
user's 3-6 s pause), and ``--mode monologue`` the same agents without pauses (the throughput bound). For a test or
another script, the API is small:

* ``await converse(url, n_agents, turns, seed, ...) -> LevelResult``: one level against a running front;
* ``level(records, buffer_s, continuous)``: the figures of recorded turns (``LevelResult.records``);
* ``stack(engine, rtf, chunk_audio_s, data_dir, worker_env)``: Redis, one worker and one front (``Stack``: base URL
  and the worker's metrics URL);
* ``run_conversations(engine, levels, turns, ...)``: levels on one stack, as a JSON-ready report;
* ``predict(n_agents, rtf, mode)``: what the formulas of docs/gpu-run.md give on the simulated engine.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import json
import math
import random
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

FIRST_AUDIO_P95_S: Final = 0.300
T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class Chunk:
    """One audio chunk of a turn: when it arrived (seconds, any clock) and how long it plays."""

    arrived: float
    seconds: float


@dataclasses.dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a stream: when its first text was sent, and its audio chunks in order."""

    sent: float
    chunks: Sequence[Chunk]


@dataclasses.dataclass(frozen=True, slots=True)
class TurnPlayback:
    """What a listener got from one turn."""

    first_audio_s: float  # first chunk's arrival minus the turn's first text
    underruns: int  # chunks that arrived after the playback reached them
    starved_s: float  # silence heard inside the turn, summed
    starts: float = float("nan")  # when the turn's playback starts (the clock of the chunks)
    ends: float = float("nan")  # when it ends


def play(turn: Turn, buffer_s: float = 0.0, after: float | None = None) -> TurnPlayback:
    """Play a turn's chunks back to back; a late chunk restarts the playback when it lands.

    The playback starts ``buffer_s`` after the first chunk arrives (a jitter buffer), or, with ``after`` (the end of
    the previous turn's playback, for a stream that speaks on without a pause), at ``after``, when that is later, so a
    first chunk that comes after it is an underrun too. A restarted playback waits ``buffer_s`` again.
    """
    if not turn.chunks:
        return TurnPlayback(first_audio_s=float("inf"), underruns=0, starved_s=0.0)
    first = turn.chunks[0]
    # Where the playback will be when it needs the next chunk: a stream that speaks on needs this turn's first
    # chunk where the previous turn's playback ends.
    playhead = first.arrived + buffer_s if after is None else after
    starts = float("nan")
    underruns = 0
    starved = 0.0
    for chunk in turn.chunks:
        if chunk.arrived > playhead:
            if chunk is not first or after is not None:
                underruns += 1
                starved += chunk.arrived - playhead
            playhead = chunk.arrived + buffer_s
        if chunk is first:
            starts = playhead
        playhead += chunk.seconds
    return TurnPlayback(
        first_audio_s=first.arrived - turn.sent, underruns=underruns, starved_s=starved, starts=starts, ends=playhead
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0-1) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclasses.dataclass(frozen=True, slots=True)
class LevelResult:
    """One level of concurrency: N streams, their underruns and first-audio figures.

    The fields after the first four are filled by :func:`level` and :func:`converse`: ``first_audio_max_s``,
    ``turns`` (turns recorded), ``dry_turns`` (turns with at least one underrun), ``errors`` (error frames and
    sockets lost, one line each), ``audio_s`` (audio received, all streams), ``wall_s`` (the level's wall time), the
    worker's ``slot_engine_share`` (engine seconds over wall seconds) and ``slot_held_share`` (seconds from claims to
    job ends over wall seconds; both None without the worker's metrics), ``mode`` and the raw ``records`` (each
    stream's turns, for a test to account again; left out of :meth:`summary`).
    """

    streams: int
    underruns: tuple[int, ...]  # per stream
    first_audio_p50_s: float
    first_audio_p95_s: float
    first_audio_max_s: float = float("nan")
    turns: int = 0
    dry_turns: int = 0
    errors: tuple[str, ...] = ()
    audio_s: float = 0.0
    wall_s: float = 0.0
    slot_engine_share: float | None = None
    slot_held_share: float | None = None
    mode: str = "stream-input"
    records: tuple[tuple[Turn, ...], ...] = dataclasses.field(default=(), compare=False, repr=False)

    @property
    def passes(self) -> bool:
        """No underrun, no error, and (but for a monologue, whose turns are sent a turn ahead of the playback, so
        their first audio is not waited for) first audio p95 within :data:`FIRST_AUDIO_P95_S`."""
        fed = sum(self.underruns) == 0 and not self.errors
        return fed and (self.mode == "monologue" or self.first_audio_p95_s <= FIRST_AUDIO_P95_S)

    def summary(self) -> dict[str, Any]:
        """The figures as JSON-ready values (the raw records left out)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "records"}


def level(
    streams: Sequence[Sequence[Turn]], buffer_s: float = 0.0, continuous: bool = False, mode: str = "stream-input"
) -> LevelResult:
    """Account one level: every stream's turns played back, each behind a jitter buffer of ``buffer_s``; with
    ``continuous`` a stream's turns play back to back (a monologue: each turn's first chunk is due where the previous
    turn's playback ends), else each turn's playback starts from its own first chunk."""
    firsts: list[float] = []
    underruns: list[int] = []
    dry = 0
    audio = 0.0
    for turns in streams:
        after: float | None = None
        played: list[TurnPlayback] = []
        for turn in turns:
            playback = play(turn, buffer_s, after)
            played.append(playback)
            if continuous and turn.chunks:
                after = playback.ends
            audio += sum(chunk.seconds for chunk in turn.chunks)
        underruns.append(sum(p.underruns for p in played))
        dry += sum(1 for p in played if p.underruns)
        firsts.extend(p.first_audio_s for p in played)
    return LevelResult(
        streams=len(streams),
        underruns=tuple(underruns),
        first_audio_p50_s=percentile(firsts, 0.5),
        first_audio_p95_s=percentile(firsts, 0.95),
        first_audio_max_s=max(firsts, default=float("nan")),
        turns=len(firsts),
        dry_turns=dry,
        audio_s=audio,
        mode=mode,
        records=tuple(tuple(turns) for turns in streams),
    )


def capacity(levels: Iterable[LevelResult]) -> int:
    """The largest N that passes with every smaller level run also passing (0 when the first fails)."""
    best = 0
    for result in sorted(levels, key=lambda r: r.streams):
        if not result.passes:
            break
        best = result.streams
    return best


def expected_streams(rtf: float, chunk_audio_s: float, first_audio_p95_s: float = FIRST_AUDIO_P95_S) -> int:
    """What one worker sharing its slot chunk by chunk, earliest deadline first (docs/scheduling.md), allows at a
    given RTF: the throughput bound (N streams need N * rtf of the slot per second of audio) and the first-audio
    bound (at worst a turn's first chunk waits for one chunk of each other stream, all due together, before its own:
    N chunks of ``rtf * chunk_audio_s`` each)."""
    if rtf <= 0:
        raise ValueError("rtf must be positive")
    chunk_s = rtf * chunk_audio_s
    if chunk_s > first_audio_p95_s:
        return 0
    by_throughput = int(1 / rtf + 1e-9)
    by_latency = int(first_audio_p95_s / chunk_s + 1e-9)
    return min(by_throughput, by_latency)


def simulated_sentence_s(chunk_audio_s: float, words_per_second: float = 2.5) -> float:
    """The longest of :data:`SENTENCES` as the simulated engine speaks it (whole chunks)."""
    words = max(len(text.split()) for text in SENTENCES)
    return math.ceil(words / words_per_second / chunk_audio_s) * chunk_audio_s


def summary_lines(levels: Mapping[int, LevelResult]) -> list[str]:
    """One line per level and the figure, as the run prints them."""
    lines = [
        f"N={n:3d}  underruns {sum(r.underruns):4d} (streams with any: {sum(1 for u in r.underruns if u)})  "
        f"first audio p50 {1000 * r.first_audio_p50_s:6.0f} ms  p95 {1000 * r.first_audio_p95_s:6.0f} ms  "
        f"{'pass' if r.passes else 'FAIL'}"
        for n, r in sorted(levels.items())
    ]
    lines.append(f"capacity: {capacity(levels.values())} realtime voices (zero underruns, first audio p95 <= 300 ms)")
    return lines


# ----- the live run: N agent sockets through a real front, Redis and worker ---------------------------------------

SENTENCES: Final = (
    "Thanks for calling, I can help you with that order today.",
    "Your parcel left our warehouse this morning and is on its way.",
    "It should arrive on Friday before noon at the latest.",
    "Is there anything else I can do for you right now?",
)
PAUSE_S: Final = 0.4  # the user's turn between two of the agent's


def _visible(text: str) -> int:
    return sum(1 for ch in text if not ch.isspace())


async def agent(base: str, session: Any, turns: int, sentences: int, sample_rate: int) -> list[Turn]:
    """One realtime agent socket (stream-input, auto_mode): each turn's next sentence is sent when the previous
    one's audio starts playing (text one sentence ahead of the playback), the next turn after the playback ends; the
    socket closes once the last turn's audio is in (its playback is not waited out)."""
    url = f"{base}/v1/text-to-speech/agent/stream-input?output_format=pcm_{sample_rate}&auto_mode=true"
    url += "&inactivity_timeout=180"
    recorded: list[Turn] = []
    async with session.ws_connect(url, max_msg_size=0) as ws:
        await ws.send_json({"text": " "})
        for turn_no in range(turns):
            texts = [SENTENCES[(turn_no + i) % len(SENTENCES)] for i in range(sentences)]
            bounds = [sum(_visible(t) for t in texts[: i + 1]) for i in range(len(texts))]
            sent_at = time.perf_counter()
            await ws.send_json({"text": texts[0] + " ", "flush": True})
            next_text = 1
            seen = 0
            chunks: list[Chunk] = []
            while seen < bounds[-1]:
                frame = json.loads((await ws.receive(timeout=120)).data)
                if not frame.get("audio"):
                    continue
                now = time.perf_counter()
                pcm = base64.b64decode(frame["audio"])
                chunks.append(Chunk(now, len(pcm) / 2 / sample_rate))
                alignment = frame.get("alignment") or {}
                seen += _visible("".join(alignment.get("chars") or []))
                started = bounds[next_text - 2] if next_text >= 2 else 0  # the current sentence's first characters
                if next_text < len(texts) and seen > started:
                    await ws.send_json({"text": texts[next_text] + " ", "flush": True})
                    next_text += 1
            recorded.append(Turn(sent=sent_at, chunks=chunks))
            if turn_no + 1 == turns:
                break  # the last turn's playback would only be waited out: the socket sends nothing more
            playback = play(Turn(sent_at, chunks))
            ends = chunks[0].arrived + sum(c.seconds for c in chunks) + playback.starved_s
            await _sleep_until(ends + PAUSE_S)
        await ws.send_json({"text": ""})
    return recorded


async def _sleep_until(deadline: float) -> None:
    await asyncio.sleep(max(0.0, deadline - time.perf_counter()))


async def run_level(base: str, streams: int, turns: int, sentences: int, sample_rate: int) -> LevelResult:
    """N agents at once, their starts spread over a second (agents do not all start speaking together)."""
    import aiohttp

    async def staggered(index: int, session: Any) -> list[Turn]:
        await asyncio.sleep(index / max(1, streams))
        return await agent(base, session, turns, sentences, sample_rate)

    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(*(staggered(i, session) for i in range(streams)))
    return level(results)


# ----- conversations: agents on multi-stream-input sockets, as LiveKit's ElevenLabs plugin speaks -----------------

PCM_RATE: Final = 24000  # the driver asks for pcm_24000 (the simulated and Turbo engines' own rate)
JITTER_BUFFER_S: Final = 0.150
USER_PAUSE_S: Final = (3.0, 6.0)
MAX_AGENTS: Final = 256
MAX_TURNS: Final = 200
MAX_LEVEL_S: Final = 3600.0
MODES: Final = ("conversation", "monologue")


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedTurn:
    """One turn an agent will speak: its sentences, and how long its user then speaks (conversation mode)."""

    sentences: tuple[str, ...]
    pause_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class AgentPlan:
    """One agent: when it first speaks (seconds after the level starts) and its turns."""

    start_s: float
    turns: tuple[PlannedTurn, ...]


def plan(
    n_agents: int,
    turns: int,
    seed: int,
    sentences: tuple[int, int] = (1, 2),
    pause_s: tuple[float, float] = USER_PAUSE_S,
    pool: Sequence[str] = SENTENCES,
) -> list[AgentPlan]:
    """What each agent says and when, drawn from ``seed`` alone: each turn ``sentences[0]`` to ``sentences[1]``
    sentences from ``pool``, each user pause uniform in ``pause_s``; an agent's first turn comes after a start drawn
    uniform in ``[0, pause_s[1])`` (its user was already speaking), so the agents do not all start together."""
    draw = random.Random(seed)
    plans = []
    for _ in range(n_agents):
        start = draw.uniform(0.0, pause_s[1])
        planned = tuple(
            PlannedTurn(
                sentences=tuple(draw.choice(pool) for _ in range(draw.randint(*sentences))),
                pause_s=draw.uniform(*pause_s),
            )
            for _ in range(turns)
        )
        plans.append(AgentPlan(start, planned))
    return plans


def _loopback_ws(url: str) -> str:
    """The front's base URL as a ws:// one; anything but http(s)://127.0.0.1 is refused."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https", "ws", "wss") or parsed.hostname != "127.0.0.1":
        raise ValueError(f"the capacity driver only talks to http://127.0.0.1:<port>, not {url!r}")
    scheme = "wss" if parsed.scheme in ("https", "wss") else "ws"
    return f"{scheme}://{parsed.netloc}{parsed.path.rstrip('/')}"


async def _read_turn(ws: Any, context: str, index: int, errors: list[str]) -> list[Chunk] | None:
    """One turn's audio chunks, read to its context's ``isFinal``; None (with the error noted) when the socket ends
    or an error frame comes instead."""
    import aiohttp

    chunks: list[Chunk] = []
    while True:
        message = await ws.receive(timeout=120)
        if message.type != aiohttp.WSMsgType.TEXT:
            errors.append(f"agent {index}: socket ended ({message.type.name}, code {ws.close_code})")
            return None
        frame = json.loads(message.data)
        if frame.get("error"):
            errors.append(f"agent {index}: {frame.get('error')}: {frame.get('message')}")
            return None
        if frame.get("contextId") != context:
            continue
        if frame.get("audio"):
            pcm = base64.b64decode(frame["audio"])
            chunks.append(Chunk(time.perf_counter(), len(pcm) / 2 / PCM_RATE))
        if frame.get("isFinal"):
            return chunks


async def _speak_turns(
    session: Any,
    url: str,
    index: int,
    agent_plan: AgentPlan,
    mode: str,
    buffer_s: float,
    stop_at: float,
    headers: Mapping[str, str],
    errors: list[str],
) -> list[Turn]:
    """One agent's socket: each turn a new context (init, its sentences each sent with a flush, an empty flush,
    close_context) read to its ``isFinal``; then the user's pause after the playback ends (conversation), or the next
    turn as soon as this one starts playing (monologue: text one turn ahead of the playback). After the last turn's
    audio the socket closes: its playback and pause would load nothing, only lengthen the level."""
    recorded: list[Turn] = []
    async with session.ws_connect(url, max_msg_size=0, headers=dict(headers), heartbeat=None) as ws:
        await asyncio.sleep(agent_plan.start_s)
        after: float | None = None  # monologue: where the previous turn's playback ends
        for number, planned in enumerate(agent_plan.turns):
            if time.perf_counter() >= stop_at:
                break
            context = f"agent{index}-turn{number}"
            await ws.send_json({"text": " ", "voice_settings": {}, "context_id": context})
            sent = time.perf_counter()
            for sentence in planned.sentences:
                await ws.send_json({"text": sentence + " ", "context_id": context, "flush": True})
            await ws.send_json({"text": "", "context_id": context, "flush": True})
            await ws.send_json({"context_id": context, "close_context": True})
            chunks = await _read_turn(ws, context, index, errors)
            if chunks is None:
                return recorded
            turn = Turn(sent=sent, chunks=chunks)
            recorded.append(turn)
            if not chunks:
                errors.append(f"agent {index}: turn {number} ended with no audio")
                continue
            if number + 1 == len(agent_plan.turns):
                break  # after the last turn the agent only listens and waits: it loads the worker no more
            playback = play(turn, buffer_s, after if mode == "monologue" else None)
            if mode == "monologue":
                after = playback.ends
                await _sleep_until(playback.starts)
            else:
                await _sleep_until(playback.ends + planned.pause_s)
        with contextlib.suppress(Exception):
            await ws.send_json({"close_socket": True})
    return recorded


def _worker_seconds(metrics_url: str) -> tuple[float, float]:
    """The worker's engine seconds and busy seconds so far, from its Prometheus endpoint."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    engine = held = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "zsynth_worker_engine_seconds_sum":
                engine += sample.value
            elif sample.name == "zsynth_worker_busy_seconds_total":
                held += sample.value
    return engine, held


async def converse(
    url: str,
    n_agents: int,
    turns: int,
    seed: int = 0,
    *,
    mode: str = "conversation",
    sentences: tuple[int, int] = (1, 2),
    pause_s: tuple[float, float] = USER_PAUSE_S,
    buffer_s: float = JITTER_BUFFER_S,
    pool: Sequence[str] = SENTENCES,
    duration_s: float | None = None,
    timeout_s: float = 900.0,
    metrics_url: str | None = None,
    voice: str = "agent",
    api_key: str | None = None,
) -> LevelResult:
    """One level of ``n_agents`` voice agents against a running front at ``url`` (``http://127.0.0.1:<port>``).

    Each agent holds one ``multi-stream-input`` socket (``auto_mode``, ``sync_alignment``, ``pcm_24000``) and speaks
    ``turns`` turns as LiveKit's ElevenLabs plugin does: each turn a new context of ``sentences`` (a range) sentences
    from ``pool``, sent, flushed and closed at once, read to its ``isFinal``. Each turn is played from its first chunk
    behind a ``buffer_s`` jitter buffer; a chunk that arrives after the playback reached it is an underrun, and a turn
    with one *ran dry*. In ``mode="conversation"`` the user then speaks for a pause drawn from ``pause_s``; in
    ``"monologue"`` each agent speaks on without a pause (each turn's text sent when the previous turn starts
    playing, the playback continuous across turns): its levels give the throughput bound. Every draw comes from
    ``seed`` (:func:`plan`).

    Bounded: at most :data:`MAX_AGENTS` agents and :data:`MAX_TURNS` turns each; no agent starts a turn after
    ``duration_s`` (when given), and the level is cancelled after ``timeout_s``. With ``metrics_url`` (the one
    worker's ``/metrics``) the result carries the share of the level's wall time its slot computed
    (``slot_engine_share``, from ``zsynth_worker_engine_seconds_sum``) and was held by a job
    (``slot_held_share``, from ``zsynth_worker_busy_seconds_total``).

    Returns the level's :class:`LevelResult`: first audio p50 / p95 / max over every turn, ``dry_turns``, per-agent
    ``underruns``, ``errors`` (error frames, lost sockets, turns without audio), ``audio_s``, ``wall_s``, and the
    raw ``records`` the figures were computed from (``level(result.records, buffer_s, continuous)`` gives them
    again).
    """
    import aiohttp

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if not 1 <= n_agents <= MAX_AGENTS or not 1 <= turns <= MAX_TURNS:
        raise ValueError(f"1-{MAX_AGENTS} agents and 1-{MAX_TURNS} turns, not {n_agents} and {turns}")
    if not 0 < timeout_s <= MAX_LEVEL_S:
        raise ValueError(f"timeout_s must be in (0, {MAX_LEVEL_S:.0f}]")
    if metrics_url is not None:
        _loopback_ws(metrics_url)
    query = urllib.parse.urlencode(
        {
            "output_format": f"pcm_{PCM_RATE}",
            "auto_mode": "true",
            "sync_alignment": "true",
            "inactivity_timeout": "180",
        }
    )
    ws_url = f"{_loopback_ws(url)}/v1/text-to-speech/{voice}/multi-stream-input?{query}"
    plans = plan(n_agents, turns, seed, sentences, pause_s, pool)
    headers = {"xi-api-key": api_key} if api_key else {}
    errors: list[str] = []
    before = await asyncio.to_thread(_worker_seconds, metrics_url) if metrics_url else None
    started = time.perf_counter()
    stop_at = started + (duration_s if duration_s is not None else MAX_LEVEL_S)
    async with aiohttp.ClientSession() as session:
        agents = [
            _speak_turns(session, ws_url, i, agent_plan, mode, buffer_s, stop_at, headers, errors)
            for i, agent_plan in enumerate(plans)
        ]
        records = await asyncio.wait_for(asyncio.gather(*agents), timeout_s)
    wall = time.perf_counter() - started
    result = level(records, buffer_s, continuous=mode == "monologue", mode=mode)
    engine_share = held_share = None
    if metrics_url and before is not None:
        engine, held = await asyncio.to_thread(_worker_seconds, metrics_url)
        engine_share, held_share = (engine - before[0]) / wall, (held - before[1]) / wall
    return dataclasses.replace(
        result,
        errors=tuple(errors),
        wall_s=wall,
        slot_engine_share=engine_share,
        slot_held_share=held_share,
    )


SIM_WORDS_PER_S: Final = 2.5  # the simulated engine's speaking rate (workers/engines/simulated.py)
FRONT_OVERHEAD_S: Final = 0.007  # front, Redis and socket time in a first audio, measured alone on this box


@dataclasses.dataclass(frozen=True, slots=True)
class Prediction:
    """What the formulas in docs/gpu-run.md ("What the figures should be") predict for one level on the simulated
    engine with one worker."""

    turn_audio_s: float  # a turn's mean audio, Ā
    slot_share: float  # U: the share of time the slot computes
    audio_per_s: float  # audio made per second, all agents
    throughput_agents: int  # the most agents of this mode whose audio the slot can make in time
    first_audio_alone_s: float  # o + h
    first_audio_p95_one_job_s: float  # today's worker, one job at a time (M/G/1 estimate)
    first_audio_max_one_job_s: float  # the same, every other agent's longest turn queued first
    first_audio_p95_by_chunk_s: float  # a worker that shares its slot chunk by chunk, earliest deadline first


def _turn_audio(chunk_audio_s: float, pool: Sequence[str], sentences: tuple[int, int]) -> tuple[float, float, float]:
    """The mean, mean square and longest audio of a turn as :func:`plan` draws it, in the simulated engine's whole
    chunks per sentence (each flushed sentence is spoken on its own)."""
    per_sentence = [
        math.ceil(len(text.split()) / SIM_WORDS_PER_S / chunk_audio_s - 1e-9) * chunk_audio_s for text in pool
    ]
    counts = range(sentences[0], sentences[1] + 1)
    first = second = 0.0
    for count in counts:  # count sentences drawn independently: mean and variance add
        mean = count * sum(per_sentence) / len(per_sentence)
        var = count * (
            sum(a * a for a in per_sentence) / len(per_sentence) - (sum(per_sentence) / len(per_sentence)) ** 2
        )
        first += mean / len(counts)
        second += (var + mean * mean) / len(counts)
    return first, second, sentences[1] * max(per_sentence)


def predict(
    n_agents: int,
    rtf: float,
    mode: str = "conversation",
    chunk_audio_s: float = 0.5,
    pool: Sequence[str] = SENTENCES,
    sentences: tuple[int, int] = (1, 2),
    pause_s: tuple[float, float] = USER_PAUSE_S,
    buffer_s: float = JITTER_BUFFER_S,
    overhead_s: float = FRONT_OVERHEAD_S,
) -> Prediction:
    """The formulas for one level on the simulated engine (RTF ``rtf``, ``chunk_audio_s`` per chunk, so each chunk
    holds the slot ``h = rtf * chunk_audio_s``): see docs/gpu-run.md, "What the figures should be"."""
    if rtf <= 0 or n_agents < 1:
        raise ValueError("rtf must be positive and n_agents at least 1")
    hold = rtf * chunk_audio_s
    mean_a, square_a, longest_a = _turn_audio(chunk_audio_s, pool, sentences)
    if mode == "monologue":
        cycle = mean_a  # each agent's playback runs on without a pause
    else:
        cycle = mean_a + sum(pause_s) / 2 + buffer_s
    share = n_agents * rtf * mean_a / cycle
    alone = overhead_s + hold
    mean_s, square_s = rtf * mean_a, rtf * rtf * square_a  # a turn's slot time, and its square
    if share >= 1.0:
        p95 = float("inf")
    elif share <= 0.05:
        p95 = alone  # fewer than one turn in twenty finds the slot busy
    else:  # M/G/1: P(wait > t) ~ U exp(-t / w), w = E[S^2] / (2 E[S] (1 - U))
        p95 = alone + square_s / (2 * mean_s * (1 - share)) * math.log(share / 0.05)
    longest = alone + (n_agents - 1) * rtf * longest_a
    return Prediction(
        turn_audio_s=mean_a,
        slot_share=share,
        audio_per_s=min(n_agents * mean_a / cycle, 1 / rtf),
        throughput_agents=int(cycle / (rtf * mean_a) + 1e-9),
        first_audio_alone_s=alone,
        first_audio_p95_one_job_s=min(p95, longest),
        first_audio_max_one_job_s=longest,
        first_audio_p95_by_chunk_s=alone + hold if share < 1.0 else float("inf"),
    )


def conversation_lines(levels: Mapping[int, LevelResult]) -> list[str]:
    """One line per conversation (or monologue) level, as the run prints them."""
    lines = []
    for n, r in sorted(levels.items()):
        share = "n/a" if r.slot_engine_share is None else f"{100 * r.slot_engine_share:3.0f} %"
        held = "n/a" if r.slot_held_share is None else f"{100 * r.slot_held_share:3.0f} %"
        lines.append(
            f"N={n:3d}  {r.mode}  turns {r.turns:4d}  ran dry {r.dry_turns:3d}  first audio p50 "
            f"{1000 * r.first_audio_p50_s:6.0f} ms  p95 {1000 * r.first_audio_p95_s:6.0f} ms  max "
            f"{1000 * r.first_audio_max_s:6.0f} ms  slot computing {share}, held {held}  audio "
            f"{r.audio_s / r.wall_s if r.wall_s else 0.0:5.1f} s/s  errors {len(r.errors)}  "
            f"{'pass' if r.passes else 'FAIL'}"
        )
    return lines


@dataclasses.dataclass(frozen=True, slots=True)
class Stack:
    """A running stack: the front's base URL and its one worker's ``/metrics``."""

    base: str
    metrics_url: str


@contextlib.contextmanager
def stack(
    engine: str, rtf: float, chunk_audio_s: float, data_dir: str, worker_env: Mapping[str, str] | None = None
) -> Iterator[Stack]:
    """Redis, one worker (with ``worker_env`` added to its environment) and one front, on loopback."""
    import os
    import subprocess
    import sys

    from harness.bench.realtime import free_port, redis_server

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # What the front and the worker import, checked first: a missing package is named here rather than found as a
    # process that exits while the run waits for it (on the device, a package the kit does not carry).
    imports = subprocess.run(
        [sys.executable, "-c", "import zsynth.cli, zsynth.speech.app, workers.main"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if imports.returncode != 0:
        raise RuntimeError(f"the front or the worker cannot start here: {imports.stderr.strip().splitlines()[-1:]}")
    with redis_server() as redis_url:
        port, metrics_port = free_port(), free_port()
        env = dict(os.environ, ZSYNTH_REDIS_URL=redis_url, ZSYNTH_DATA_DIR=data_dir, ZSYNTH_LOG_LEVEL="WARNING")
        worker = dict(
            env, ZSYNTH_ENGINE=engine, ZSYNTH_WORKER_ID="capacity-0", ZSYNTH_WORKER_METRICS_PORT=str(metrics_port)
        )
        if engine == "simulated":
            worker.update(
                ZSYNTH_LOAD_TEST_ONLY="1",
                ZSYNTH_SIM_CHUNK_HOLD=str(rtf * chunk_audio_s),
                ZSYNTH_SIM_CHUNK_AUDIO=str(chunk_audio_s),
            )
        worker.update(worker_env or {})
        procs = [
            subprocess.Popen([sys.executable, "-m", "zsynth", "worker"], env=worker, cwd=root),
            subprocess.Popen([sys.executable, "-m", "zsynth", "serve"], env=dict(env, ZSYNTH_PORT=str(port)), cwd=root),
        ]
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 600
            while True:  # the front answers health once a worker has announced itself
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(f"{base}/readyz", timeout=2) as reply:
                        if reply.status == 200:
                            break
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError("the front or the worker did not start")
                time.sleep(0.5)
            yield Stack(base, f"http://127.0.0.1:{metrics_port}/metrics")
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)


def run(
    engine: str,
    levels: Sequence[int],
    turns: int,
    sentences: int,
    rtf: float = 0.1,
    chunk_audio_s: float = 0.5,
    deadline: float | None = None,
) -> dict[str, Any]:
    """The whole run: one stack, each level in turn until one fails or ``deadline`` (time.monotonic) passes."""
    import tempfile

    results: dict[int, LevelResult] = {}
    with tempfile.TemporaryDirectory() as data, stack(engine, rtf, chunk_audio_s, data) as running:
        base = running.base
        asyncio.run(run_level(base, 1, 1, 1, 24000))  # warms the path; not counted
        for n in levels:
            if deadline is not None and time.monotonic() > deadline:
                break
            results[n] = asyncio.run(run_level(base, n, turns, sentences, 24000))
            print(summary_lines({n: results[n]})[0], flush=True)
            if not results[n].passes:
                break
    report: dict[str, Any] = {
        "engine": engine,
        "capacity": capacity(results.values()),
        "levels": {n: r.summary() for n, r in results.items()},
        "turns": turns,
        "sentences": sentences,
    }
    if engine == "simulated":
        report["rtf"] = rtf
        report["allowed"] = expected_streams(rtf, chunk_audio_s)
    return report


def run_conversations(
    engine: str,
    levels: Sequence[int],
    turns: int,
    mode: str = "conversation",
    seed: int = 0,
    rtf: float = 0.04,
    chunk_audio_s: float = 0.5,
    duration_s: float | None = None,
    deadline: float | None = None,
    worker_env: Mapping[str, str] | None = None,
    sentences: tuple[int, int] = (1, 2),
    pause_s: tuple[float, float] = USER_PAUSE_S,
) -> dict[str, Any]:
    """Conversation (or monologue) levels on one stack, each level in turn, every one run (a failing level does not
    end the run: its figures are the point) until ``deadline`` (time.monotonic) passes; a level still running then
    is cancelled and named in ``cut_short``. A level's seed is ``seed`` plus its N, so a level is the same whatever
    levels run before it."""
    import tempfile

    results: dict[int, LevelResult] = {}
    cut_short: int | None = None
    with tempfile.TemporaryDirectory() as data, stack(engine, rtf, chunk_audio_s, data, worker_env) as running:
        asyncio.run(converse(running.base, 1, 1, seed, mode=mode, pause_s=(0.0, 0.1)))  # warms the path
        for n in levels:
            left = MAX_LEVEL_S if deadline is None else min(MAX_LEVEL_S, deadline - time.monotonic())
            if left < 1.0:
                break
            level_run = converse(
                running.base,
                n,
                turns,
                seed + n,
                mode=mode,
                sentences=sentences,
                pause_s=pause_s,
                duration_s=duration_s,
                timeout_s=left,
                metrics_url=running.metrics_url,
            )
            try:
                results[n] = asyncio.run(level_run)
            except TimeoutError:
                cut_short = n
                break
            print(conversation_lines({n: results[n]})[0], flush=True)
    report: dict[str, Any] = {
        "engine": engine,
        "mode": mode,
        "capacity": capacity(results.values()),
        "levels": {n: r.summary() for n, r in results.items()},
        "turns": turns,
        "seed": seed,
        "jitter_buffer_s": JITTER_BUFFER_S,
        "user_pause_s": list(pause_s),
        "sentences_per_turn": list(sentences),
    }
    if cut_short is not None:
        report["cut_short"] = cut_short
    if engine == "simulated":
        report["rtf"] = rtf
    return report


def _pair(text: str, kind: Callable[[str], T]) -> tuple[T, T]:
    low, high = (kind(part) for part in text.split(","))
    return low, high


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--engine", choices=("simulated", "turbo"), default="simulated")
    parser.add_argument(
        "--mode",
        choices=("stream-input", *MODES),
        default="stream-input",
        help="stream-input agents (the default), conversing agents on multi-stream-input, or monologues",
    )
    parser.add_argument("--seed", type=int, default=0, help="conversation/monologue: the draws of texts and pauses")
    parser.add_argument(
        "--duration", type=float, help="conversation/monologue: no agent starts a turn after this many seconds"
    )
    parser.add_argument("--turn-sentences", default="1,2", help="conversation/monologue: sentences a turn, MIN,MAX")
    parser.add_argument("--pause", default="3,6", help="conversation: the user's pause after a turn, MIN,MAX seconds")
    parser.add_argument("--rtf", type=float, default=0.1, help="the simulated engine's real-time factor")
    parser.add_argument("--chunk-audio-s", type=float, default=0.5)
    parser.add_argument("--levels", default="1,2,4,8,12,16,20,24,28,32")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=3)
    parser.add_argument("--reduced", action="store_true", help="levels 1-4, 2 turns of 2 sentences (a CPU test)")
    parser.add_argument("--out", help="write the levels and the figure here as JSON")


def bench(args: argparse.Namespace) -> int:
    """Run the capacity levels, print the figure, write the levels as JSON to ``--out``."""
    levels = [int(n) for n in args.levels.split(",")]
    if args.reduced:
        levels, args.turns, args.sentences = [n for n in levels if n <= 4] or [1, 2, 3, 4], 2, 2
    if args.mode in MODES:
        report = run_conversations(
            args.engine,
            levels,
            args.turns,
            args.mode,
            args.seed,
            args.rtf,
            args.chunk_audio_s,
            args.duration,
            sentences=_pair(args.turn_sentences, int),
            pause_s=_pair(args.pause, float),
        )
        bound = "" if args.mode == "monologue" else ", first audio p95 <= 300 ms"
        print(f"capacity: {report['capacity']} agents ({args.mode}: none ran dry{bound})")
        if args.out:
            with open(args.out, "w") as out:
                json.dump(report, out, indent=1)
        return 0
    report = run(args.engine, levels, args.turns, args.sentences, args.rtf, args.chunk_audio_s)
    print(f"capacity: {report['capacity']} realtime voices (zero underruns, first audio p95 <= 300 ms)")
    if "allowed" in report:
        print(f"an RTF of {args.rtf} allows {report['allowed']} (one worker, its slot shared chunk by chunk)")
    print(f"capacity_figure={report['capacity']}")
    if args.out:
        with open(args.out, "w") as out:
            json.dump(report, out, indent=1)
    return 0
