#!/usr/bin/env python3
"""What hostile text costs: Piper on one long word, the text stage's normalization, and the front's event loop.

Four parts, each bounded (``--parts`` picks some):

* ``words``: Piper speaks one word of 50 to 300 characters, each in a fresh process (time, peak RSS growth), and a
  2,000-character word as the front hands it to a worker (cut at Piper's bound), up to its first chunk. These are
  the figures behind Piper's word bound (zsynth/core/text/sentences.py ENGINE_WORD_CHARS).
* ``normalize``: CPU time of normalization for 10,000 and 20,000 characters of hostile runs: linear work doubles.
* ``front``: a redis-server, one Piper worker and a front on loopback; ``GET /healthz`` every 5 ms on a kept-alive
  connection while ``{"text": "9" * 10000, "apply_text_normalization": "on"}`` is posted to ``/stream``. The
  slowest ping beyond the median is the front's event-loop stall; the status is what the client got.
* ``dictionaries``: pronunciation dictionaries (issue 36, F1). CPU time to compile a 10,000-rule lexicon (once per
  version and front), and of the text stage for a 10,000-character text with it, with the issue's 10,000 identical
  rules named three times over ``"x " * 5000``, and with 10,000 distinct rules that all match; then a front on
  loopback, ``GET /healthz`` every 5 ms while those requests are posted to ``/stream`` (their stall, as ``front``).

``--reduced`` runs fewer repetitions (3, not 20) of each timing and one request per front case.

Usage (from the repository root)::

    .venv/bin/python -m harness.bench text-stage [--parts words,normalize,front,dictionaries] [--reduced]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from harness.stack import local_stack

ROOT = Path(__file__).resolve().parents[2]

WORD = "1st2nd3rd4th"
FRONT_CASES = [
    ("an ordinary sentence", {"text": "The quick brown fox jumps over the lazy dog."}),
    ("10,000 digits, apply_text_normalization on", {"text": "9" * 10_000, "apply_text_normalization": "on"}),
]
HOSTILE = ["9", "1,", "1.", "$1", "12:", "#1", "1st", ",000", "a.", "1st2nd$3.4%#5 6:7,"]

# Run in a fresh process per case, so each peak RSS is that case's own.
_PIPER_CHILD = r"""
import json, resource, sys, time
from workers.engines.base import VoiceSpec
from workers.engines.piper import PiperEngine
engine = PiperEngine(1)
engine.warm_up()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
text = sys.argv[1]
if sys.argv[2] == "stage":
    import asyncio
    from zsynth.core.text.bounds import UNBOUNDED
    from zsynth.core.text.prepare import TextOptions, prepare
    spoken = asyncio.run(prepare(text, TextOptions(), "piper", None, limits=UNBOUNDED))
    text = spoken.text
started = time.perf_counter()
first = None
for chunk in engine.synthesize(text, VoiceSpec("joe"), {}, lambda: False):
    first = time.perf_counter() - started
    audio = len(chunk.pcm) / engine.sample_rate
    break
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": first, "audio_s": audio, "rss_mb": (peak - base) / 1024}))
"""


def _piper(text: str, mode: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _PIPER_CHILD, text, mode], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def words() -> None:
    print("Piper, one word spoken alone (fresh process each):")
    for unit in (WORD, "9"):
        for length in (50, 100, 200, 300):
            text = (unit * (length // len(unit) + 1))[:length]
            r = _piper(text, "raw")
            audio, rss = f"{r['audio_s']:5.1f} s of audio", f"RSS +{r['rss_mb']:.0f} MB"
            print(f"  {unit!r:16} {length:5d} chars  {r['s']:6.2f} s  {audio}  {rss}")
    r = _piper(WORD * 166, "stage")
    print(f"  2,000-character word through the text stage: first chunk {r['s']:.2f} s, RSS +{r['rss_mb']:.0f} MB")


def _cpu_s(text: str) -> float:
    from zsynth.core.text.normalize import normalize_text

    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        try:
            normalize_text(text)
        except Exception:  # the old normalizer raised on long numbers; the time is what counts here
            pass
        best = min(best, time.process_time() - started)
        if best > 1.0:
            break  # slow enough to tell; no need to repeat it
    return best


def normalize() -> None:
    print("Normalization, CPU time (best of 3):")
    for unit in HOSTILE:
        ten, twenty = ((unit * (n // len(unit) + 1))[:n] for n in (10_000, 20_000))
        a = _cpu_s(ten)
        b = _cpu_s(twenty) if a < 5 else float("nan")
        print(f"  {unit!r:22} 10k chars {a * 1000:8.1f} ms   20k chars {b * 1000:8.1f} ms   x{b / a:.2f}")


async def _stall(base: str, body: dict[str, Any]) -> tuple[int, float, float]:
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as pings, aiohttp.ClientSession(timeout=timeout) as posts:
        latencies: list[float] = []
        done = asyncio.Event()

        async def ping() -> None:
            while not done.is_set():
                started = time.perf_counter()
                async with pings.get(base + "/healthz") as resp:
                    await resp.read()
                latencies.append(time.perf_counter() - started)
                await asyncio.sleep(0.005)

        pinger = asyncio.create_task(ping())
        await asyncio.sleep(0.5)  # a baseline of quiet pings
        async with posts.post(base + "/v1/text-to-speech/joe/stream?output_format=pcm_22050", json=body) as resp:
            status = resp.status
            if status == 200 and len(body["text"]) < 200:
                await resp.read()  # a short one is read whole
            elif status == 200:
                await resp.content.readany()  # 10,000 nines would take an hour to say: the first audio will do
        done.set()
        await pinger
    return status, statistics.median(latencies), max(latencies)


def front() -> None:
    with local_stack(name="bench-text") as stack:
        # An ordinary sentence first: the stall any request shows on this box, to set the other against.
        results = [(label, asyncio.run(_stall(stack.base, body))) for label, body in FRONT_CASES]
    print("Front, POST /stream while GET /healthz is timed every 5 ms (stall: slowest ping beyond the median):")
    for label, (status, median, worst) in results:
        stall, ping = (worst - median) * 1000, median * 1000
        print(f"  {label:44} answer {status}  stall {stall:7.1f} ms  (median ping {ping:.1f} ms)")


def _lexicon_rules() -> list[dict[str, object]]:
    """10,000 distinct rules like a real lexicon's: words and two-word names, mixed case, a few phonemes."""
    syllables = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "zu"]
    rules: list[dict[str, object]] = []
    for n in range(10_000):
        word = "".join(syllables[int(d)] for d in f"{n:04d}")
        string = word.capitalize() + (" Street" if n % 7 == 0 else "")
        if n % 10 == 0:
            rules.append({"type": "phoneme", "string_to_replace": string, "phoneme": "k a l o", "alphabet": "ipa"})
        else:
            rules.append(
                {"type": "alias", "string_to_replace": string, "alias": word.upper(), "case_sensitive": n % 3 > 0}
            )
    return rules


def _lexicon_text(rules: list[dict[str, object]]) -> str:
    """10,000 characters: every third word is one of the lexicon's strings, the rest ordinary words."""
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "today"]
    out: list[str] = []
    n = 0
    while sum(map(len, out)) + len(out) < 10_000:
        out.append(str(rules[(n * 7919) % len(rules)]["string_to_replace"]) if n % 3 == 0 else words[n % 10])
        n += 1
    return " ".join(out)[:10_000]


def _dictionary_cases() -> list[tuple[str, list[dict[str, object]], str, int]]:
    """(label, rules, text, locators) of each case."""
    lexicon = _lexicon_rules()
    distinct: list[dict[str, object]] = [
        {"type": "alias", "string_to_replace": f"w{n}", "alias": f"v{n}"} for n in range(10_000)
    ]
    return [
        ("10,000-rule lexicon, 10,000-character text", lexicon, _lexicon_text(lexicon), 1),
        (
            "F1: 10,000 identical rules x3, 'x ' * 5000",
            [{"type": "alias", "string_to_replace": "x", "alias": "y"}] * 10_000,
            "x " * 5000,
            3,
        ),
        # Words with full stops: one sentence of 1,600 words would keep Piper past the first-chunk deadline.
        ("10,000 distinct rules that all match", distinct, ". ".join(f"w{n}" for n in range(0, 10_000, 6))[:10_000], 1),
    ]


def dictionaries(reduced: bool) -> None:
    from zsynth.core.text.bounds import UNBOUNDED
    from zsynth.core.text.dictionaries.matcher import Lexicon
    from zsynth.core.text.dictionaries.rules import parse_rule
    from zsynth.core.text.dictionaries.store import DictionaryStore, DirectoryBackend
    from zsynth.core.text.prepare import TextOptions, prepare

    runs = 3 if reduced else 20
    print(f"Dictionaries, CPU time (compile: once per version and front; text stage: best and median of {runs}):")
    for label, raw, text, locators in _dictionary_cases():
        rules = [parse_rule(item, n) for n, item in enumerate(raw)]  # as stored: before any deduplication
        started = time.process_time()
        Lexicon(rules)
        compiled = time.process_time() - started

        async def stage(rules: list[Any] = rules, text: str = text, locators: int = locators) -> list[float]:
            with tempfile.TemporaryDirectory() as tmp:
                store = DictionaryStore(DirectoryBackend(Path(tmp)))
                made = await store.create("bench", None, rules, "default")
                options = TextOptions(locators=((made.id, made.version_id),) * locators)
                times = []
                for _ in range(runs):
                    started = time.process_time()  # every thread's CPU: the stage runs on one for long texts
                    await prepare(text, options, "piper", store, workspace="default", limits=UNBOUNDED)
                    times.append(time.process_time() - started)
                return times

        times = asyncio.run(stage())
        best, median = min(times) * 1000, statistics.median(times) * 1000
        print(f"  {label:46} compile {compiled * 1000:7.0f} ms   stage {best:6.1f} ms (median {median:.1f} ms)")
    _dictionaries_front(reduced)


async def _upload(base: str, raw: list[dict[str, object]]) -> str:
    async with aiohttp.ClientSession() as session:
        body = {"name": "bench", "rules": raw}
        async with session.post(base + "/v1/pronunciation-dictionaries/add-from-rules", json=body) as resp:
            made = await resp.json()
            if resp.status != 200:
                raise SystemExit(f"upload: {resp.status} {made}")
            return str(made["id"])


def _dictionaries_front(reduced: bool) -> None:
    results = []
    # 10,000 rules in JSON are over the default 256 KiB body limit.
    with local_stack(front_env={"ZSYNTH_MAX_JSON_BODY_BYTES": str(4 * 2**20)}, name="bench-dict") as stack:
        base = stack.base
        # The box's own stall for any request, to set the others against.
        for _ in range(1 if reduced else 3):
            results.append((FRONT_CASES[0][0], asyncio.run(_stall(base, FRONT_CASES[0][1]))))
        for label, raw, text, locators in _dictionary_cases():
            dictionary_id = asyncio.run(_upload(base, raw))
            named = [{"pronunciation_dictionary_id": dictionary_id}] * locators
            body = {"text": text, "pronunciation_dictionary_locators": named}
            for _ in range(1 if reduced else 3):
                results.append((label, asyncio.run(_stall(base, body))))
    print("Front, POST /stream naming the dictionary while GET /healthz is timed every 5 ms:")
    for label, (status, median, worst) in results:
        stall, ping = (worst - median) * 1000, median * 1000
        print(f"  {label:46} answer {status}  stall {stall:7.1f} ms  (median ping {ping:.1f} ms)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument(
        "--parts",
        default="words,normalize,front,dictionaries",
        help="comma-separated: words, normalize, front, dictionaries",
    )
    parser.add_argument("--reduced", action="store_true", help="fewer repetitions (3, not 20), one request per case")


def bench(args: argparse.Namespace) -> None:
    parts = args.parts.split(",")
    for name, run in (("words", words), ("normalize", normalize), ("front", front)):
        if name in parts:
            run()
    if "dictionaries" in parts:
        dictionaries(args.reduced)
