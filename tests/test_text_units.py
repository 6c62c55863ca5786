"""Pure functions of text preparation: the English normalizer on a table of inputs, the alignment mapping back to
the caller's characters, break tags, dictionary rules and PLS lexicons, and the markers' safety from splitting."""

from __future__ import annotations

import pytest

from workers.engines import VoiceSpec, load_engine
from workers.engines.phonemes import arpabet_to_ipa
from workers.engines.piper import _piper_input
from zsynth.core.config import Settings
from zsynth.core.text import marks
from zsynth.core.text.bounds import UNBOUNDED
from zsynth.core.text.dictionaries.matcher import apply_rules
from zsynth.core.text.dictionaries.rules import Rule, RuleError, parse_pls, parse_rule, to_pls
from zsynth.core.text.normalize import normalize, normalize_text, wants_normalization
from zsynth.core.text.prepare import TextOptionError, TextOptions, parse_locators, parse_normalization, prepare
from zsynth.core.text.sentences import split_sentences
from zsynth.core.text.spoken import AlignmentMapper, Spoken

pytestmark = pytest.mark.unit

TABLE = [
    # cardinals, ordinals, decimals, negatives
    ("I have 3 cats.", "I have three cats."),
    ("1,234,567 people", "one million, two hundred and thirty-four thousand, five hundred and sixty-seven people"),
    ("pi is 3.14", "pi is three point one four"),
    ("it was -5 outside", "it was minus five outside"),
    ("the 21st and the 3rd", "the twenty-first and the third"),
    ("track #7", "track number seven"),
    # currency and percentages
    ("It costs $3.50.", "It costs three dollars and fifty cents."),
    ("$1 only", "one dollar only"),
    ("$0.99", "ninety-nine cents"),
    ("€5 each", "five euros each"),
    ("£2.01", "two pounds and one penny"),
    ("$3 million", "three million dollars"),
    ("50% off", "fifty percent off"),
    ("up 12.5 %", "up twelve point five percent"),
    # times, dates, years, phone numbers
    ("Meet at 5:30 pm.", "Meet at five thirty P M."),
    ("at 10:00 sharp", "at ten o'clock sharp"),
    ("7:05 a.m. Then", "seven oh five A M. Then"),
    ("On 2024-03-12 we met", "On March twelfth, twenty twenty-four we met"),
    ("Due 12/03/2024.", "Due December third, twenty twenty-four."),
    ("Born in 1984.", "Born in nineteen eighty-four."),
    ("Call 555-123-4567 now", "Call five five five, one two three, four five six seven now"),
    ("or 555-0199.", "or five five five, zero one nine nine."),
    ("at 5pm or 11 a.m. Then", "at five P M or eleven A M. Then"),
    ("Call (800) 555-0199.", "Call eight zero zero, five five five, zero one nine nine."),
    # units, abbreviations, symbols
    ("5 km and 10kg", "five kilometers and ten kilograms"),
    ("1 km", "one kilometer"),
    ("a 3m pole", "a three meters pole"),
    ("100 °C", "one hundred degrees Celsius"),
    ("Dr. Smith is here.", "Doctor Smith is here."),
    ("on Main St. Then St. Louis.", "on Main Street. Then Saint Louis."),
    ("apples, pears, etc. All good", "apples, pears, et cetera. All good"),
    ("Tom & Jerry", "Tom and Jerry"),
    ("mail john.doe@example.com today", "mail john dot doe at example dot com today"),
    ("see https://example.com/docs.", "see example dot com slash docs."),
    ("Davis jr. sang on Main rd. by Sunset BLVD. today", "Davis Junior sang on Main Road by Sunset Boulevard today"),
    # what must stay as written
    ("Nothing to do here.", "Nothing to do here."),
    ("Version 2 of 10:75", "Version two of ten:seventy-five"),
]


@pytest.mark.parametrize(("text", "spoken"), TABLE)
def test_normalizer_table(text: str, spoken: str) -> None:
    assert normalize_text(text) == spoken


def test_auto_normalizes_for_turbo_only() -> None:
    assert wants_normalization("auto", "turbo") and not wants_normalization("auto", "piper")
    assert wants_normalization("on", "piper") and not wants_normalization("off", "turbo")


def _mapped(spoken: Spoken, cut: int) -> tuple[list[str], list[float], list[float]]:
    """Feed the spoken text (white space collapsed, as the worker reports it) in two pieces, 10 units a character."""
    chars = list(" ".join(spoken.text.split()))
    starts = [10.0 * i for i in range(len(chars))]
    ends = [s + 10.0 for s in starts]
    mapper = AlignmentMapper(spoken)
    first = mapper.feed(chars[:cut], starts[:cut], ends[:cut])
    second = mapper.feed(chars[cut:], starts[cut:], ends[cut:], final=True)
    return first[0] + second[0], first[1] + second[1], first[2] + second[2]


@pytest.mark.parametrize("cut", [0, 5, 12, 30, 1000])
def test_alignment_maps_back_onto_the_callers_characters(cut: int) -> None:
    spoken = Spoken("Pay  $3.50 now.")
    normalize(spoken)
    chars, starts, ends = _mapped(spoken, cut)
    assert "".join(chars) == "Pay  $3.50 now."
    assert all(a <= b for a, b in zip(starts, ends, strict=True))
    assert starts == sorted(starts)
    # "$3.50" (5 characters) shares the span of "three dollars and fifty cents" (29 characters, 10 units each).
    price = slice(5, 10)
    assert starts[price][0] == pytest.approx(40.0) and ends[price][-1] == pytest.approx(40.0 + 290.0)
    # "now." keeps its own characters' times.
    assert starts[-4] == pytest.approx(10.0 * (len("Pay three dollars and fifty cents ")))


async def test_break_tags_become_pauses_and_other_markup_stays() -> None:
    spoken = await prepare(
        'One <break time="1.5s" /> two <break time="9s"/> three <b>bold</b> <break time="250ms"/>',
        TextOptions(normalization="off"),
        "piper",
        None,
        workspace="default",
        limits=UNBOUNDED,
    )
    kinds = [p.pause_ms for p in marks.pieces(spoken.text) if p.pause_ms is not None]
    assert kinds == [1500, 3000, 250]  # at most 3 s
    assert "<b>bold</b>" in spoken.text


def test_markers_are_never_split_and_callers_cannot_forge_them() -> None:
    text = "First sentence. " + marks.pause(1000) + " " + marks.phonemes("ipa", "t ə. m eɪ! t oʊ") + " end. " * 80
    pieces = split_sentences(text, 60)
    assert len(pieces) > 1, pieces
    for piece in pieces:
        assert piece.count(marks.OPEN) == piece.count(marks.CLOSE)
    assert sum(piece.count(marks.pause(1000)) for piece in pieces) == 1, pieces
    assert marks.OPEN not in Spoken("a \ue000b3000\ue001 b").text


def test_rules_case_and_word_boundaries() -> None:
    spoken = Spoken("Zsynth, zsynth and zsynthetic.")
    apply_rules(spoken, [Rule("zsynth", "alias", alias="zee synth", case_sensitive=False)], "piper")
    assert spoken.text == "zee synth, zee synth and zsynthetic."
    spoken = Spoken("Zsynth, zsynth and zsynthetic.")
    apply_rules(spoken, [Rule("zsynth", "alias", alias="Z", word_boundaries=False)], "piper")
    assert spoken.text == "Zsynth, Z and Zetic."
    # First match wins: a later rule never rewrites an alias.
    spoken = Spoken("AI")
    apply_rules(spoken, [Rule("AI", "alias", alias="A I"), Rule("A", "alias", alias="ay")], "piper")
    assert spoken.text == "A I"


def test_phoneme_rules_only_on_engines_that_speak_phonemes() -> None:
    rule = Rule("tomato", "phoneme", phoneme="T AH0 M EY1 T OW0", alphabet="cmu-arpabet")
    piper, turbo = Spoken("a tomato"), Spoken("a tomato")
    apply_rules(piper, [rule], "piper")
    apply_rules(turbo, [rule], "turbo")
    assert turbo.text == "a tomato"
    assert _piper_input(piper.text) == "a [[ təmˈeɪtoʊ ]]"
    assert arpabet_to_ipa("HH AH0 L OW1") == "həlˈoʊ"


def test_rule_checks() -> None:
    with pytest.raises(RuleError, match="alphabet"):
        parse_rule({"type": "phoneme", "string_to_replace": "x", "phoneme": "x", "alphabet": "sampa"})
    with pytest.raises(RuleError, match="alias"):
        parse_rule({"type": "alias", "string_to_replace": "x"})
    with pytest.raises(TextOptionError):
        parse_locators([{"pronunciation_dictionary_id": "a"}] * 4)
    with pytest.raises(TextOptionError, match="pronunciation_dictionary_id"):
        parse_locators([{"pronunciation_dictionary_id": "  "}])
    with pytest.raises(TextOptionError):
        parse_normalization("sometimes")


def test_pls_round_trip() -> None:
    rules = [
        Rule("AWS", "alias", alias="Amazon Web Services"),
        Rule("tomato", "phoneme", phoneme="təˈmeɪtoʊ", alphabet="ipa"),
        Rule("potato", "phoneme", phoneme="P AH0 T EY1 T OW0", alphabet="cmu-arpabet"),
    ]
    assert parse_pls(to_pls(rules)) == rules
    with pytest.raises(RuleError):
        parse_pls(b"<html/>")


def test_engines_turn_pause_markers_into_silent_chunks(tmp_path) -> None:
    engine = load_engine(
        Settings(engine="simulated", data_dir=tmp_path).with_(
            sim_load_test_only=True, sim_chunk_hold_s=0.0, sim_chunk_audio_s=0.5
        )
    )
    text = f"one two three {marks.pause(1500)} four five {marks.phonemes('ipa', 'fɔː')}"
    chunks = list(engine.synthesize(text, VoiceSpec("x"), {}, lambda: False))
    silent = [c for c in chunks if c.text == marks.pause(1500)]
    assert len(silent) == 1 and len(silent[0].pcm) == engine.sample_rate * 3 // 2 and not silent[0].pcm.any()
    spoken = " ".join(c.text for c in chunks if c is not silent[0] and c.text)
    # The text around the pause is spoken in order; a phoneme marker is dropped by an engine without phoneme input.
    assert spoken.split() == ["one", "two", "three", "four", "five"]
    position = next(i for i, c in enumerate(chunks) if c is silent[0])
    assert 0 < position < len(chunks) - 1
