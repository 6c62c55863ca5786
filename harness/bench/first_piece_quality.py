"""Speech quality of the first piece: word error rate of cut against uncut speech, and a picture of the seams.

Speaks a fixed set of sentences (commands, questions, numbers, lists) with the embedded Piper engine twice: whole,
one call per sentence, and cut the way a worker cuts a job's first sentence (``workers.synthesis.speak_cut``). A CPU
recognizer (PocketSphinx and the en-US model its PyPI package bundles: nothing is downloaded) transcribes both, and
the script prints each sentence's word errors and the word error rate of each side; the target is cut no more than
2 points worse. It also times each sentence's first piece against its whole first call (what the cut saves before
the first audio), and with ``--picture`` draws the spectrograms of a few seams, the seam marked, into a PNG.

    python -m harness.bench first-piece-quality                      # 32 sentences: about 10 minutes
    python -m harness.bench first-piece-quality --picture docs/first-piece-seams.png --json out.json
    python -m harness.bench first-piece-quality --reduced            # 6 sentences: a check that it works
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from workers.engines.base import EngineChunk, VoiceSpec
from workers.engines.piper import PiperEngine
from workers.synthesis import SEAM_SILENCE, first_piece, speak_cut
from zsynth.core.text.normalize import normalize_text

SENTENCES = [
    # commands
    "Turn off the lights in the living room, and lock the front door.",
    "Set a timer for fifteen minutes, then remind me to check the oven.",
    "Please remember to bring your umbrella because it will rain later this afternoon.",
    "Play some quiet music in the bedroom and turn the volume down a little.",
    "Open the garage door, turn on the porch light and start the coffee machine.",
    "Call my sister on her mobile phone and tell her that I will be late tonight.",
    "Move the meeting with the design team to Thursday morning at ten.",
    "Add milk, eggs, bread and butter to my shopping list for tomorrow.",
    "Send a message to the whole team saying that the release is ready for testing.",
    "Turn the heating up to twenty one degrees in the kitchen and the hall.",
    # questions
    "Could you tell me how long it takes to drive from Boston to New York?",
    "What time does the pharmacy on Main Street close on Saturday evenings?",
    "Do you know whether the train to the airport is running on time today?",
    "If it rains tomorrow, should we move the picnic to the following weekend?",
    "Which of these three laptops has the longest battery life and the best screen?",
    "When you get home, could you check whether the parcel has arrived?",
    "How many people have signed up for the workshop on Friday afternoon?",
    "Is there a quiet restaurant near the station where we could talk for an hour?",
    # numbers
    "The meeting starts at 3:30 in room 204, on the second floor of the east building.",
    "Your order of 12 items, with a total of 48 dollars, will arrive on March 5th.",
    "In 2023 the company hired 350 people and opened offices in 14 countries.",
    "The temperature dropped to minus 7 degrees overnight, the lowest in 20 years.",
    "Flight 417 to Chicago now departs from gate 22, about 45 minutes later than planned.",
    "The recipe needs 250 grams of flour, 2 eggs and half a litre of milk.",
    "My phone number ends in 4589, and my postal code is 10115.",
    # lists
    "We need apples, oranges, bananas and a few lemons for the party on Saturday.",
    "The kit includes a hammer, three screwdrivers, a tape measure and a small saw.",
    "Bring your passport, your ticket, a warm jacket and some snacks for the journey.",
    "The course covers history, geography, mathematics and a little bit of music.",
    "On Monday we paint, on Tuesday we clean, and on Wednesday we move the furniture.",
    # plain statements
    "The weather today is sunny, with a high of seventy degrees and light winds from the west.",
    "After a long day at work, nothing feels better than a hot shower and a good book.",
]
REDUCED = [SENTENCES[i] for i in (0, 3, 10, 18, 25, 30)]
RATE_16K = 16000


def words(text: str) -> list[str]:
    """The words of ``text`` as a recognizer writes them: lower case, no punctuation, numbers read out."""
    spoken = normalize_text(text).lower().replace("-", " ")
    return re.findall(r"[a-z']+", spoken)


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Word-level Levenshtein distance (substitutions, insertions, deletions)."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


class Recognizer:
    """PocketSphinx with the en-US model its package bundles, on 16 kHz mono."""

    def __init__(self) -> None:
        from pocketsphinx import Decoder

        self._decoder = Decoder(samprate=RATE_16K, loglevel="FATAL")

    def __call__(self, pcm: np.ndarray, rate: int) -> list[str]:
        from scipy.signal import resample_poly

        audio = resample_poly(pcm, RATE_16K, rate)
        raw = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes()
        self._decoder.start_utt()
        self._decoder.process_raw(raw, full_utt=True)
        self._decoder.end_utt()
        hyp = self._decoder.hyp()
        return [w for w in (hyp.hypstr if hyp is not None else "").lower().split() if not w.startswith("<")]


def speak(engine: PiperEngine, text: str, cut: bool) -> tuple[list[EngineChunk], float]:
    """The chunks of ``text`` (cut as a worker cuts a first sentence, or whole) and ms until the first one."""
    start = time.perf_counter()
    first_ms = 0.0
    chunks: list[EngineChunk] = []

    def synthesize(piece: str) -> Iterable[EngineChunk]:
        return engine.synthesize(piece, VoiceSpec("joe"), {}, lambda: False)

    for chunk in speak_cut(synthesize, text, first_piece(text, cut), engine.sample_rate):
        if not chunks:
            first_ms = (time.perf_counter() - start) * 1000.0
        chunks.append(chunk)
    return chunks, first_ms


def seam_figures(pcm: np.ndarray, seam: int, rate: int) -> dict[str, float]:
    """The sample step across a seam (full scale 1.0) and the silence around it (ms)."""
    quiet = np.abs(pcm) < SEAM_SILENCE
    after = int(np.argmin(quiet[seam:])) if not quiet[seam:].all() else len(pcm) - seam
    before = int(np.argmin(quiet[:seam][::-1])) if not quiet[:seam].all() else seam
    return {"step": float(abs(pcm[seam] - pcm[seam - 1])), "pause_ms": round((before + after) / rate * 1000.0, 1)}


def spectrogram_png(seams: list[tuple[str, np.ndarray, int]], rate: int, path: Path) -> None:
    """Spectrograms (0-8 kHz, 1.2 s around each seam, the seam a red line) stacked into one PNG with captions."""
    from PIL import Image, ImageDraw
    from scipy.signal import spectrogram

    rows = []
    for caption, pcm, seam in seams:
        half = int(0.6 * rate)
        window = pcm[max(0, seam - half) : seam + half]
        at = seam - max(0, seam - half)
        freqs, times, power = spectrogram(window, fs=rate, nperseg=512, noverlap=448)
        keep = freqs <= 8000
        db = 10 * np.log10(power[keep] + 1e-10)
        db = np.clip((db - (db.max() - 70)) / 70, 0, 1)[::-1]  # 70 dB of range, low frequencies at the bottom
        height, width = db.shape
        img = np.stack([db**0.6 * 255, db**1.2 * 230, (1 - db) * 90 + db * 40], axis=-1).astype(np.uint8)
        picture = Image.fromarray(img).resize((width * 3, height), Image.Resampling.NEAREST)
        canvas = Image.new("RGB", (picture.width, picture.height + 18), "white")
        canvas.paste(picture, (0, 18))
        draw = ImageDraw.Draw(canvas)
        x = round(np.searchsorted(times, at / rate) * 3)
        draw.line([(x, 18), (x, canvas.height)], fill=(255, 40, 40), width=2)
        draw.text((4, 3), caption, fill="black")
        rows.append(canvas)
    out = Image.new("RGB", (max(r.width for r in rows), sum(r.height + 6 for r in rows)), "white")
    y = 0
    for row in rows:
        out.paste(row, (0, y))
        y += row.height + 6
    out.save(path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    parser.add_argument("--reduced", action="store_true", help="6 sentences: a quick check that it works")
    parser.add_argument("--rounds", type=int, default=2, help="times each side speaks each sentence (Piper varies)")
    parser.add_argument("--threads", type=int, default=2, help="engine threads (2: one job alone on a 2-core box)")
    parser.add_argument("--picture", type=Path, help="write a PNG of the first seams' spectrograms here")
    parser.add_argument("--seams", type=int, default=4, help="how many seams the picture shows")
    parser.add_argument("--json", type=Path, help="write every sentence's figures here")


def bench(args: argparse.Namespace) -> int:
    sentences = REDUCED if args.reduced else SENTENCES
    print(f"# load average at start: {os.getloadavg()[0]:.2f}")
    engine = PiperEngine(threads=args.threads)
    engine.warm_up()
    recognize = Recognizer()
    rows: list[dict[str, Any]] = []
    seams: list[tuple[str, np.ndarray, int]] = []
    for text in sentences:
        ref = words(text)
        row: dict[str, Any] = {"text": text, "pieces": first_piece(text, True), "ref_words": len(ref) * args.rounds}
        for side in ("uncut", "cut"):
            errors, hyps, firsts = 0, [], []
            for _ in range(args.rounds):
                chunks, first_ms = speak(engine, text, side == "cut")
                pcm = np.concatenate([c.pcm for c in chunks])
                hyp = recognize(pcm, engine.sample_rate)
                errors += edit_distance(ref, hyp)
                hyps.append(" ".join(hyp))
                firsts.append(first_ms)
            row[side] = {"errors": errors, "hyp": hyps, "first_ms": round(min(firsts), 1)}
            if side == "cut" and row["pieces"]:
                row["seam"] = seam_figures(pcm, len(chunks[0].pcm), engine.sample_rate)
            if side == "cut" and row["pieces"] and len(seams) < args.seams:
                seams.append((f"{row['pieces'][0]} | {row['pieces'][1]}", pcm, len(chunks[0].pcm)))
        rows.append(row)
        head = row["pieces"][0] if row["pieces"] else "(whole)"
        print(
            f"{row['uncut']['errors']:2d} / {row['cut']['errors']:2d} errors of {row['ref_words']:2d} words, "
            "first audio "
            f"{row['uncut']['first_ms']:6.0f} / {row['cut']['first_ms']:6.0f} ms  [{head}] {text}"
        )
    total = sum(r["ref_words"] for r in rows)
    wer = {side: 100.0 * sum(r[side]["errors"] for r in rows) / total for side in ("uncut", "cut")}
    cut_rows = [r for r in rows if r["pieces"]]
    saved = [r["cut"]["first_ms"] / r["uncut"]["first_ms"] for r in cut_rows]
    print(f"# {len(rows)} sentences spoken {args.rounds} times each: {total} words, {len(cut_rows)} sentences cut")
    change = wer["cut"] - wer["uncut"]
    print(f"# word error rate: uncut {wer['uncut']:.1f} %, cut {wer['cut']:.1f} % ({change:+.1f} points)")
    steps = [r["seam"]["step"] for r in cut_rows]
    pauses = [r["seam"]["pause_ms"] for r in cut_rows]
    if steps:
        print(
            f"# seams: largest sample step {max(steps):.5f} of full scale; "
            f"silence {min(pauses):.0f}-{max(pauses):.0f} ms"
        )
    if saved:
        print(f"# first audio of the cut sentences, cut / uncut: median {statistics.median(saved):.2f}x")
    print(f"# load average at end: {os.getloadavg()[0]:.2f}")
    if args.picture and seams:
        spectrogram_png(seams, engine.sample_rate, args.picture)
        print(f"# seams drawn into {args.picture}")
    if args.json:
        args.json.write_text(json.dumps({"wer": wer, "sentences": rows}, indent=1) + "\n", encoding="utf-8")
    return 0
