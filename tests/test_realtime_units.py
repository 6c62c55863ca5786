"""Unit tests of the pure parts: the text buffer's schedule, the character alignment, the audio frame and the
sockets' query string."""

from __future__ import annotations

import base64
import json

import pytest

from zsynth.core.alignment import CharAlignment, Timeline, char_alignment, join_chunks
from zsynth.kit.endpoints import validate
from zsynth.speech.ws.buffer import ScheduleError, TextBuffer, parse_schedule
from zsynth.speech.ws.connection import WsError, ws_error
from zsynth.speech.ws.query import RealtimeQuery
from zsynth.speech.ws.speaker import MAX_FRAME_AUDIO_BYTES, _frames, audio_frame

pytestmark = pytest.mark.unit


def test_schedule_thresholds_advance_and_repeat():
    buffer = TextBuffer((50, 60))
    word = "abcd "  # 5 characters a word
    released: list[str] = []
    for _ in range(60):
        released += buffer.add(word)
    # Released at 50, 60 and again 60 buffered characters (sent stripped of the trailing space).
    assert [len(s) for s in released[:3]] == [49, 59, 59]


def test_never_cuts_a_word():
    buffer = TextBuffer((50,))
    assert buffer.add("x" * 30 + " " + "y" * 30) == ["x" * 30]  # the y-word may still be growing
    assert buffer.add("yyy") == []
    assert buffer.drain() == ["y" * 33]


def test_try_trigger_needs_fifty_characters():
    buffer = TextBuffer((500,))
    assert buffer.add("short text ", try_trigger=True) == []
    assert buffer.add("and now well past the fifty character minimum ", try_trigger=True) == [
        "short text and now well past the fifty character minimum"
    ]


def test_flush_and_auto_mode():
    assert TextBuffer().add("Hi", flush=True) == ["Hi"]
    auto = TextBuffer(auto_mode=True)
    # auto_mode: every message is a segment of its own, whole, never joined to the next one.
    assert auto.add("See you tomorrow morning.") == ["See you tomorrow morning."]
    assert auto.add("Is there anything else") == ["Is there anything else"]
    assert auto.add(" ") == []
    assert auto.add("3.") == ["3."]
    assert TextBuffer().drain() == []


@pytest.mark.parametrize(
    ("first", "second", "joined"),
    [
        ("tomorrow morning.", "Is there", "tomorrow morning. Is there"),
        ('he said "stop!"', "Then", 'he said "stop!" Then'),
        ("Really?", '"Yes"', 'Really? "Yes"'),
        ("morning. ", "Is", "morning. Is"),  # the client's own space is kept, no second one
        ("pi is 3.", "14", "pi is 3.14"),  # a decimal point, not a sentence end
        ("see example.", "com", "see example.com"),  # lower case: a continuation
        ("the U.S.", "Army", "the U.S. Army"),
        ("Hel", "lo there", "Hello there"),  # a word split across messages
    ],
)
def test_messages_keep_their_boundary(first, second, joined):
    buffer = TextBuffer((500,))
    assert buffer.add(first) == []
    assert buffer.add(second) == []
    assert buffer.drain() == [joined]


@pytest.mark.parametrize("bad", [[], [10], [600], ["a"], [True], "120", [120.5]])
def test_bad_schedules(bad):
    with pytest.raises(ScheduleError):
        parse_schedule(bad)


def test_default_schedule():
    assert parse_schedule(None) == (120, 160, 250, 290)


def _partition(al: CharAlignment, total_ms: int) -> None:
    assert al.start_ms[0] == 0
    for i in range(1, len(al.chars)):
        assert al.start_ms[i] == al.start_ms[i - 1] + al.dur_ms[i - 1]
    assert al.end_ms == total_ms


def test_alignment_from_phoneme_timing():
    # "Hi you." as Piper reports it: ^ lead, words split by " ", trailing "." pause, $ tail.
    timing = [("^", 1000), ("h", 1000), ("a", 2000), (" ", 500), ("j", 1000), ("u", 1500), (".", 2000), ("$", 1000)]
    al = char_alignment("Hi you.", timing, 10000, 10000)
    assert al.chars == list("Hi you.")
    _partition(al, 1000)
    # "H" takes the lead and its share of the word; the space gets the space phoneme; "." the pause and the tail.
    assert al.start_ms[2] == 400 and al.dur_ms[2] == 50
    assert al.start_ms[6] == 700 and al.dur_ms[6] == 300


def test_alignment_estimate_when_words_do_not_line_up():
    timing = [("^", 1000), ("θ", 4000), (" ", 500), ("d", 3500), ("$", 1000)]  # "$3" read as two words
    al = char_alignment("$3", timing, 10000, 10000)
    _partition(al, 1000)
    assert char_alignment("Hello", None, 22050, 22050).end_ms == 1000


def test_timeline_cuts_spans_of_sent_audio():
    timeline = Timeline()
    timeline.add(CharAlignment(list("ab"), [0, 100], [100, 100]))
    timeline.add(CharAlignment(list("cd"), [0, 50], [50, 50]))
    first, span = timeline.take(150)
    assert first is not None and first.chars == ["a", "b"] and first.end_ms == 150 and span == 150
    rest, _ = timeline.take(100, final=True)
    assert rest is not None and rest.chars == [" ", "c", "d"]
    assert rest.start_ms[0] == 0 and rest.end_ms == 150  # the final span reaches the last character's end


def test_a_continuing_timeline_owes_the_space_before_its_first_word():
    continued = Timeline(continues=True)
    continued.add(CharAlignment([], [], []))  # a chunk without characters owes nothing yet
    continued.add(CharAlignment(list("ok"), [0, 100], [100, 100]))
    span, _ = continued.take(200, final=True)
    assert span is not None and span.chars == [" ", "o", "k"] and span.dur_ms[0] == 0 and span.end_ms == 200
    # A part that starts with its own white space is not given a second one; a fresh job owes nothing.
    spaced = Timeline(continues=True)
    spaced.add(CharAlignment(list(" x"), [0, 0], [0, 80]))
    fresh = Timeline()
    fresh.add(CharAlignment(list("x"), [0], [80]))
    spaced_span, _ = spaced.take(80, final=True)
    fresh_span, _ = fresh.take(80, final=True)
    assert spaced_span is not None and spaced_span.chars == [" ", "x"]
    assert fresh_span is not None and fresh_span.chars == ["x"]


def test_join_chunks_in_seconds():
    chars, starts, ends = join_chunks(
        [(0.0, CharAlignment(["a"], [0], [500])), (0.5, CharAlignment(["b"], [0], [250]))]
    )
    assert chars == ["a", "b"] and starts == [0.0, 0.5] and ends == [0.5, 0.75]


def test_timeline_places_received_chunks_at_their_audio_offsets():
    # The worker cuts its chunks with take(); a receiver places each at the audio sent before it (span_ms).
    sender = Timeline()
    sender.add(CharAlignment(list("abc"), [0, 100, 200], [100, 100, 100]))
    first, first_ms = sender.take(150)
    rest, rest_ms = sender.take(100, final=True)
    assert first is not None and rest is not None and (first_ms, rest_ms) == (150, 150)
    receiver = Timeline()
    meta: list[dict[str, object]] = [
        {"span_ms": first_ms, "alignment": first.to_meta()},
        {"span_ms": 20.0},  # a chunk of audio without characters still moves the clock
        {"span_ms": rest_ms, "alignment": rest.to_meta()},
    ]
    placed = [receiver.place(m) for m in meta]
    assert placed[1] is None and [p[0] for p in placed if p is not None] == pytest.approx([0.0, 0.17])
    assert receiver.placed_s == pytest.approx(0.32)
    chars, starts, ends = join_chunks([p for p in placed if p is not None])
    assert chars == ["a", "b", "c"] and starts == [0.0, 0.1, 0.17] and ends == [0.1, 0.15, 0.32]


@pytest.mark.parametrize(
    ("alignment", "context_id", "multi"),
    [
        (None, None, False),
        ({"chars": ["h", "é", '"'], "charStartTimesMs": [0, 10, 20], "charDurationsMs": [10, 10, 5]}, None, False),
        (None, None, True),
        ({"chars": ["a"], "charStartTimesMs": [0], "charDurationsMs": [40]}, 'ctx "1" ü', True),
    ],
)
def test_audio_frame_is_the_json_a_client_parses(alignment, context_id, multi):
    audio = bytes(range(256)) * 3 + b"\x00"
    frame = json.loads(audio_frame(audio, alignment, context_id, multi=multi))
    expected = {"audio": base64.b64encode(audio).decode(), "isFinal": None}
    expected |= {"normalizedAlignment": alignment, "alignment": alignment}
    if multi:
        expected["contextId"] = context_id
    assert frame == expected


def test_a_large_chunk_is_split_into_frames_with_its_characters():
    audio = bytes(range(256)) * 5000  # 1.28 MB: over the 512 KiB a frame may carry
    alignment = char_alignment("Split me into frames.", None, len(audio) // 2, 24000)
    frames = _frames(audio, alignment)
    assert len(frames) == 3 and all(len(part) <= MAX_FRAME_AUDIO_BYTES for part, _ in frames)
    assert b"".join(part for part, _ in frames) == audio
    assert "".join(c for _, a in frames if a for c in a["chars"]) == "Split me into frames."
    # One frame when the chunk fits: the chunk's own alignment, unchanged.
    assert _frames(audio[:1000], alignment) == [(audio[:1000], alignment.websocket())]


# ----- the sockets' query string ------------------------------------------------------------------------------------


def _query(**data: str) -> RealtimeQuery:
    return validate(RealtimeQuery, data, ws_error)


def _refused_query(**data: str) -> tuple[str, str]:
    with pytest.raises(WsError) as err:
        _query(**data)
    return err.value.code, err.value.message


def test_realtime_query_defaults():
    query = _query()
    assert query.output_format.name == "mp3_44100_128"
    assert query.inactivity_timeout is None  # the server's ZSYNTH_WS_INACTIVITY_TIMEOUT_S
    assert (query.seed, query.model_id, query.language_code, query.apply_text_normalization) == (None,) * 4
    assert (query.sync_alignment, query.auto_mode, query.enable_logging) == (False, False, True)
    # An empty value is a missing one, for every parameter.
    empty = {name: "" for name in RealtimeQuery.model_fields}
    assert _query(**empty) == query


def test_realtime_query_reads_what_the_sockets_accept():
    query = _query(
        output_format="pcm_16000",
        inactivity_timeout=" 180 ",
        seed="+42",
        sync_alignment="TRUE",
        auto_mode="1",
        enable_logging="no",
        model_id="eleven_flash_v2_5",
        language_code="en",
        apply_text_normalization="whatever",  # kept as sent: checked with the first message
    )
    assert (query.output_format.name, query.inactivity_timeout, query.seed) == ("pcm_16000", 180.0, 42)
    assert (query.sync_alignment, query.auto_mode, query.enable_logging) == (True, True, False)
    assert (query.model_id, query.language_code, query.apply_text_normalization) == (
        "eleven_flash_v2_5",
        "en",
        "whatever",
    )
    assert _query(inactivity_timeout="5", seed="0").inactivity_timeout == 5.0


@pytest.mark.parametrize(
    ("data", "code", "message"),
    [
        ({"inactivity_timeout": "4"}, "invalid_parameters", "from 5 to 180 (got 4)."),
        ({"inactivity_timeout": "2.5"}, "invalid_parameters", "inactivity_timeout must be a whole number of seconds."),
        # Too large for a float: refused like any other out-of-range value (it used to end the socket abruptly).
        ({"inactivity_timeout": "9" * 400}, "invalid_parameters", "from 5 to 180 (got 999999999999...)."),
        # Past Python's digit limit for int(): still a refusal, never an exception out of the socket.
        ({"inactivity_timeout": "9" * 5000}, "invalid_parameters", "whole number of seconds"),
        ({"seed": "-1"}, "invalid_parameters", "Field 'seed' must be an integer 0..4294967295."),
        ({"seed": "x"}, "invalid_parameters", "Field 'seed' must be an integer 0..4294967295."),
        ({"sync_alignment": "maybe"}, "invalid_parameters", "Query parameter 'sync_alignment' must be true or false."),
        ({"enable_logging": "2"}, "invalid_parameters", "Query parameter 'enable_logging' must be true or false."),
    ],
)
def test_realtime_query_refusals(data, code, message):
    refused_code, refused_message = _refused_query(**data)
    assert refused_code == code and message in refused_message
    assert len(refused_message) < 200  # a hostile value is never echoed whole


def test_realtime_query_answers_the_first_bad_parameter_in_the_order_checked():
    bad = {"enable_logging": "2", "auto_mode": "x", "seed": "x", "inactivity_timeout": "1", "output_format": "nope"}
    assert _refused_query(**bad)[0] == "invalid_output_format"
    del bad["output_format"]
    assert "inactivity_timeout" in _refused_query(**bad)[1]
    del bad["inactivity_timeout"]
    assert "seed" in _refused_query(**bad)[1]
    del bad["seed"]
    assert "'auto_mode'" in _refused_query(**bad)[1]
