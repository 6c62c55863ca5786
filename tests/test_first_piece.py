"""The first piece: a job's long first sentence spoken in two calls, cut at a clause mark or a word boundary.

Unit tests of the pure cutting functions on hostile text (numbers, abbreviations, markers), of the seam's trim, and
a real front with real Piper workers: a long first sentence comes as two chunks whose audio joins without a click
or a gap and whose alignment is continuous and spells the text; ``ZSYNTH_FIRST_PIECE=false`` speaks it whole; and
while one worker's slot is shared, the rest of a first sentence is cut once more (three chunks, still seamless).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.audio import decode_audio
from harness.base import make_settings
from harness.workers import WorkerProcess
from workers.engines.base import EngineChunk
from workers.synthesis import SEAM_SILENCE, SEAM_WORD_MS, first_piece, rest_piece, seam_head, seam_rest, speak_cut
from zsynth.core.text import marks
from zsynth.core.text.sentences import FIRST_PIECE_CLAUSE_CHARS, REST_CUT_WORDS, first_piece_cut, rest_cut
from zsynth.speech.app import create_app

RATE = 22050
LONG = "The weather today is sunny, with a high of seventy degrees and light winds from the west."


def _cut(text: str) -> tuple[str, str] | None:
    return first_piece(text, enabled=True)


# ----- the cutting function -------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_a_long_sentence_is_cut_at_its_first_clause_mark() -> None:
    assert _cut(LONG) == (
        "The weather today is sunny,",
        "with a high of seventy degrees and light winds from the west.",
    )
    # One word before the mark is too short a head: a word-boundary cut, before a phrase, instead.
    assert _cut("First; open the door and then turn on every light in the hall.") == (
        "First; open the door",
        "and then turn on every light in the hall.",
    )
    assert _cut("Listen carefully: the door code changes every Monday morning.") == (
        "Listen carefully:",
        "the door code changes every Monday morning.",
    )


@pytest.mark.unit
def test_short_sentences_and_disabled_cuts_are_spoken_whole() -> None:
    assert _cut("Turning on the kitchen lights.") is None
    assert _cut("Yes, of course.") is None
    assert first_piece(LONG, enabled=False) is None
    assert len("Turning on the kitchen lights.") < FIRST_PIECE_CLAUSE_CHARS


@pytest.mark.unit
def test_without_a_clause_mark_a_long_sentence_is_cut_before_a_phrase() -> None:
    text = "Please remember to bring your umbrella because it will rain later this afternoon."
    assert _cut(text) == ("Please remember to bring your umbrella", "because it will rain later this afternoon.")


@pytest.mark.unit
def test_only_the_first_sentence_is_cut() -> None:
    text = "Okay. Then the weather today is sunny, with a high of seventy degrees."
    assert _cut(text) is None  # the first sentence is "Okay."


@pytest.mark.unit
@pytest.mark.parametrize(
    "text",
    [
        "It costs 1, 000 dollars, or so the people at the shop told us yesterday.",  # a spaced thousands group
        "In 2024 we shipped 35 releases to 1200 customers across 14 countries in total.",
        "For example e.g., i.e., and etc., are abbreviations that people use all the time.",
        "We met Dr. Smith and Mr. Jones at the St. James hotel on the corner of Main Street.",
        "The total was $5 million dollars 3.5 percent 10:30 am 1,000,000 units 4 5 6 7 8 9.",
        "Say " + marks.phonemes("ipa", "təˈmeɪtoʊ") + ", " + marks.pause(300) + " then wait for the others to go.",
        "Now " + marks.pause(500) + ", " + marks.pause(200) + " listen to the band play a few more songs.",
    ],
)
def test_hostile_first_sentences_are_never_cut_inside_a_number_an_abbreviation_or_a_marker(text: str) -> None:
    cut = first_piece_cut(text)
    if cut is None:
        return
    head, rest = text[:cut], text[cut:]
    assert rest[:1].isspace() and head.rstrip() == head, "the cut is at white space"
    last, following = head.split()[-1], rest.split()[0]
    assert marks.OPEN not in last + following and marks.CLOSE not in last + following
    assert not (last.rstrip(",;:")[-1:].isdigit() and following[:1].isdigit()), "inside a number"
    assert "." not in last, "after an abbreviation"
    if last[-1] not in ",;:":
        assert last.isalpha() and following.isalpha(), "a word cut is between plain words"
    assert head.count(marks.OPEN) == head.count(marks.CLOSE)


@pytest.mark.unit
@given(st.text(alphabet=st.sampled_from(list("ab1 ,;:.!?$%\ue000\ue001-'")), max_size=120))
def test_any_cut_is_at_white_space_between_words_and_splits_no_marker(text: str) -> None:
    for cut in (first_piece_cut(text), first_piece_cut(text, short=True)):
        if cut is not None:
            assert 0 < cut < len(text) and text[cut].isspace() and not text[cut - 1].isspace()
            assert text[:cut].split() and len(text[cut:].split()) >= 3
            assert text[:cut].split()[-1] != "a", "a head never ends on a word that leans on the next"


@pytest.mark.unit
def test_a_shared_slot_cuts_a_shorter_head_and_never_after_a_word_that_leans_on_the_next() -> None:
    sentence = "Please leave the parcel at the front door before noon today."
    assert first_piece(sentence, enabled=True) == ("Please leave the parcel", "at the front door before noon today.")
    assert first_piece(sentence, enabled=True, short=True) == (
        "Please leave",  # not "Please leave the": a head never ends on an article, a preposition or a conjunction
        "the parcel at the front door before noon today.",
    )
    # A clause mark within four words still wins; one further on gives way to a two- or three-word head.
    listen = "Listen carefully: the door code changes every Monday morning."
    assert first_piece(listen, enabled=True, short=True) == _cut(listen)
    assert first_piece(LONG, enabled=True, short=True) == (
        "The weather today",
        "is sunny, with a high of seventy degrees and light winds from the west.",
    )
    assert first_piece("Turning on the kitchen lights.", enabled=True, short=True) is None


@pytest.mark.unit
def test_a_rest_is_cut_again_nearest_its_middle_phrase_and_only_when_long_enough() -> None:
    assert rest_piece("at the front door before noon today.") == ("at the front door", "before noon today.")
    # A clause mark wins over a phrase start; only the first sentence is looked at.
    assert rest_piece("we went to the store, then home and slept well. And then the next one came.") == (
        "we went to the store,",
        "then home and slept well. And then the next one came.",
    )
    assert rest_piece("the kitchen lights are on now.") is None  # one short call already
    assert rest_piece("lights on. Then the long sentence that follows it here.") is None
    assert rest_piece("alpha beta gamma delta epsilon zeta.") is None  # short, and no phrase to cut before


@pytest.mark.unit
@given(st.text(alphabet=st.sampled_from(list("ab1 ,;:.!?$%\ue000\ue001-'")), max_size=120))
def test_any_rest_cut_is_at_white_space_and_leaves_words_on_both_sides(text: str) -> None:
    cut = rest_cut(text)
    if cut is not None:
        assert 0 < cut < len(text) and text[cut].isspace() and not text[cut - 1].isspace()
        assert len(text[:cut].split()) >= REST_CUT_WORDS and len(text[cut:].split()) >= REST_CUT_WORDS
        assert text[:cut].split()[-1] != "a"


# ----- the seam ------------------------------------------------------------------------------------------------------


def _speech(ms: float, lead_ms: float, trail_ms: float) -> np.ndarray:
    tone = 0.3 * np.sin(np.arange(round(RATE * ms / 1000)) * 0.2).astype(np.float32)
    silence = [np.full(round(RATE * x / 1000), 1e-5, dtype=np.float32) for x in (lead_ms, trail_ms)]
    return np.concatenate([silence[0], tone, silence[1]])


@pytest.mark.unit
def test_a_word_seam_keeps_a_gap_between_words_and_the_timing_still_sums() -> None:
    head = EngineChunk(_speech(300, 50, 150), "Please remember", [("^", 1102), ("p", 6615), ("$", 3308)])
    rest = EngineChunk(_speech(300, 60, 40), "to bring it.", [("^", 1323), ("t", 6615), ("$", 882)])
    chunks = list(
        speak_cut(lambda t: [head] if t == "Please remember" else [rest], "", ("Please remember", "to bring it."), RATE)
    )
    assert [c.text for c in chunks] == ["Please remember", "to bring it."]
    joined = np.concatenate([c.pcm for c in chunks])
    seam = len(chunks[0].pcm)
    quiet = np.abs(joined) < SEAM_SILENCE
    gap = int(np.argmin(quiet[seam:])) + int(np.argmin(quiet[:seam][::-1]))
    assert gap <= RATE * SEAM_WORD_MS / 1000 + 1
    for chunk in chunks:
        assert chunk.timing is not None and sum(n for _, n in chunk.timing) == len(chunk.pcm)
    assert abs(float(joined[seam]) - float(joined[seam - 1])) < SEAM_SILENCE


@pytest.mark.unit
def test_a_rest_cut_again_joins_at_two_seams_and_is_asked_only_when_it_comes() -> None:
    texts = {
        "Please remember": _speech(300, 50, 150),
        "to bring it,": _speech(300, 60, 200),
        "and the keys.": _speech(300, 60, 40),
    }
    asked: list[str] = []

    def recut(rest: str) -> tuple[str, str] | None:
        asked.append(rest)
        return ("to bring it,", "and the keys.") if rest == "to bring it, and the keys." else None

    made = speak_cut(
        lambda t: [EngineChunk(texts[t], t)], "", ("Please remember", "to bring it, and the keys."), RATE, recut
    )
    assert next(made).text == "Please remember" and asked == []  # the rest is cut (or not) when it is spoken
    chunks = list(made)
    assert asked == ["to bring it, and the keys.", "and the keys."]
    assert [c.text for c in chunks] == ["to bring it,", "and the keys."]
    # The middle piece lost leading silence (after a word seam) and kept its comma's whole 200 ms pause at its end
    # (a clause seam keeps up to two thirds of 350 ms there); the last piece keeps its 60 ms lead, as 200 + 60 ms is
    # within the comma's 350.
    assert len(chunks[0].pcm) < len(texts["to bring it,"])
    trail = len(chunks[0].pcm) - int(np.flatnonzero(np.abs(chunks[0].pcm) >= SEAM_SILENCE)[-1])
    assert RATE * 0.19 < trail <= RATE * 0.21
    assert len(chunks[1].pcm) == len(texts["and the keys."])


@pytest.mark.unit
def test_a_clause_seam_keeps_the_pause_it_had() -> None:
    head, kept = seam_head(EngineChunk(_speech(300, 50, 200), "Well,"), 350.0, RATE)
    rest = seam_rest(EngineChunk(_speech(300, 50, 40), "then."), round(RATE * 0.35) - kept, RATE)
    assert len(head.pcm) == len(_speech(300, 50, 200)) and len(rest.pcm) == len(_speech(300, 50, 40))


# ----- real front, real Piper workers --------------------------------------------------------------------------------


async def _lines(client, text: str) -> list[dict]:
    resp = await client.post(
        "/v1/text-to-speech/joe/stream/with-timestamps?output_format=pcm_22050",
        json={"text": text, "apply_text_normalization": "off"},
    )
    assert resp.status == 200, await resp.text()
    return [json.loads(line) for line in (await resp.text()).splitlines() if line.strip()]


def _pcm(line: dict) -> np.ndarray:
    import base64

    samples, rate = decode_audio(base64.b64decode(line["audio_base64"]), "pcm_22050")
    assert rate == RATE
    return samples


@pytest.mark.heavy
async def test_a_long_first_sentence_comes_as_two_chunks_that_join_without_a_click(
    aiohttp_client, private_redis_url, private_worker, tmp_path: Path
) -> None:
    # A worker of its own: on a worker whose slot another test shares, the head is shorter and the rest cut again.
    client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
    lines = await _lines(client, LONG)
    audio = [_pcm(line) for line in lines]
    assert len(audio[0]) > 0.5 * RATE and len(audio[1]) > RATE, "the first piece, then the rest"
    first_chars = "".join(lines[0]["alignment"]["characters"])
    assert first_chars.rstrip() == "The weather today is sunny,"
    # The seam: no step between the two chunks' samples beyond the silence level, and a comma's pause (not a gap).
    joined = np.concatenate(audio)
    seam = len(audio[0])
    assert abs(float(joined[seam]) - float(joined[seam - 1])) < 0.01
    quiet = np.abs(joined) < SEAM_SILENCE
    pause_ms = (int(np.argmin(quiet[seam:])) + int(np.argmin(quiet[:seam][::-1]))) / RATE * 1000
    assert 120 <= pause_ms <= 360, pause_ms
    # Alignment: continuous across the seam and spelling the text exactly.
    chars: list[str] = []
    starts: list[float] = []
    ends: list[float] = []
    for line in lines:
        if line["alignment"]:
            chars += line["alignment"]["characters"]
            starts += line["alignment"]["character_start_times_seconds"]
            ends += line["alignment"]["character_end_times_seconds"]
    assert "".join(chars) == LONG
    assert starts == sorted(starts) and all(abs(b - a) <= 0.002 for a, b in zip(ends, starts[1:], strict=False))
    assert starts[0] == 0.0 and abs(ends[-1] - len(joined) / RATE) < 0.05
    rest_start = starts[len(first_chars)]
    assert abs(rest_start - seam / RATE) < 0.35  # the rest's first letter is placed right after the first piece


def _chars(lines: list[dict]) -> str:
    return "".join("".join(line["alignment"]["characters"]) for line in lines if line["alignment"])


@pytest.mark.heavy
async def test_while_the_slot_is_shared_a_rest_is_cut_again_and_still_spells_the_text(
    aiohttp_client, private_redis_url, private_worker, tmp_path: Path
) -> None:
    import asyncio

    client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
    texts = [LONG, "Please leave the parcel at the front door before noon today, and ring the bell twice."]
    both = await asyncio.gather(*(_lines(client, text) for text in texts))
    pieces: list[int] = []
    for text, lines in zip(texts, both, strict=True):
        assert _chars(lines) == text
        audio = np.concatenate([_pcm(line) for line in lines])
        assert len(audio) > 3 * RATE and float(np.abs(audio).max()) > 0.05
        first_sentence = [line for line in lines if _pcm(line).size]
        pieces.append(len(first_sentence))
    # One worker held both streams, so the rest of the first sentence that was spoken while the other stream was
    # held came in two calls: three chunks, where alone it comes in two (the test above).
    assert max(pieces) >= 3, pieces


@pytest.mark.heavy
async def test_the_setting_turns_the_first_piece_off(aiohttp_client, private_redis_url, tmp_path: Path) -> None:
    worker = WorkerProcess(private_redis_url, "first-piece-off", tmp_path, ZSYNTH_FIRST_PIECE="false").wait_ready()
    try:
        client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
        lines = await _lines(client, LONG)
    finally:
        worker.stop()
    with_audio = [line for line in lines if _pcm(line).size]
    assert len(with_audio) == 1 and "".join(lines[0]["alignment"]["characters"]) == LONG
