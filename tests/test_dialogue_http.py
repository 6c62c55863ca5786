"""Text to dialogue over HTTP with the real ElevenLabs SDK (``text_to_dialogue.*``) against a real ``zsynth serve``,
and the bodies it must refuse before anything is queued."""

from __future__ import annotations

import base64

import httpx
import pytest
from elevenlabs import DialogueInput, ElevenLabs
from elevenlabs.core.api_error import ApiError

from harness.audio import assert_speech, decode_audio
from harness.fronts import front_process
from harness.voice_clips import reference_file

pytestmark = pytest.mark.heavy

KEY = "dialogue-static-key"
TURNS = [
    ("Good morning, how did you sleep?", "joe"),
    ("Very well, thank you for asking.", "CLONE"),
    ("Then let us get to work right away.", "joe"),
]


@pytest.fixture(scope="module")
def front(redis_url, data_dir, shared_workers):
    with front_process(redis_url, data_dir, ZSYNTH_API_KEY=KEY) as (_, base):
        yield base


@pytest.fixture(scope="module")
def sdk(front) -> ElevenLabs:
    return ElevenLabs(base_url=front, api_key=KEY)


@pytest.fixture(scope="module")
def inputs(front) -> list[DialogueInput]:
    resp = httpx.post(
        f"{front}/v1/voices/add",
        headers={"xi-api-key": KEY},
        data={"name": "dialogue-clone"},
        files={"files": ("ref.wav", reference_file("wav"), "audio/wav")},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    clone = resp.json()["voice_id"]
    return [DialogueInput(text=text, voice_id=clone if voice == "CLONE" else voice) for text, voice in TURNS]


def all_text() -> str:
    return " ".join(text for text, _ in TURNS)


@pytest.mark.parametrize("output_format", ["mp3_44100_128", "pcm_16000", "wav_22050", "opus_48000_64", "ulaw_8000"])
def test_convert_is_one_answer_in_every_voice(sdk, inputs, output_format):
    audio = b"".join(sdk.text_to_dialogue.convert(inputs=inputs, output_format=output_format))
    samples, rate = decode_audio(audio, output_format)
    assert rate == int(output_format.split("_")[1])
    assert_speech(samples, rate, all_text())


def test_stream_arrives_in_pieces(sdk, inputs):
    pieces = [piece for piece in sdk.text_to_dialogue.stream(inputs=inputs, output_format="pcm_16000") if piece]
    assert len(pieces) >= 3
    assert_speech(*decode_audio(b"".join(pieces), "pcm_16000"), all_text())


def check_segments(segments, chars: list[str], inputs, seconds: float) -> None:
    assert [s.dialogue_input_index for s in segments] == list(range(len(inputs)))
    assert [s.voice_id for s in segments] == [i.voice_id for i in inputs]
    assert segments[0].start_time_seconds == 0 and segments[0].character_start_index == 0
    for before, after in zip(segments, segments[1:], strict=False):
        assert after.start_time_seconds == pytest.approx(before.end_time_seconds, abs=0.002)
        assert after.character_start_index == before.character_end_index
    assert segments[-1].character_end_index == len(chars)
    assert segments[-1].end_time_seconds == pytest.approx(seconds, abs=0.01)
    for segment, item in zip(segments, inputs, strict=True):
        spoken = "".join(chars[segment.character_start_index : segment.character_end_index])
        assert spoken.split() == item.text.split()


def test_with_timestamps_segments_and_alignment(sdk, inputs):
    answer = sdk.text_to_dialogue.convert_with_timestamps(inputs=inputs, output_format="pcm_16000")
    audio = base64.b64decode(answer.audio_base_64)
    seconds = assert_speech(*decode_audio(audio, "pcm_16000"), all_text())
    chars = answer.alignment.characters
    starts = answer.alignment.character_start_times_seconds
    assert starts == sorted(starts) and starts[-1] < seconds
    check_segments(answer.voice_segments, chars, inputs, seconds)


def test_stream_with_timestamps_lines(sdk, inputs):
    lines = list(sdk.text_to_dialogue.stream_with_timestamps(inputs=inputs, output_format="pcm_16000"))
    audio = b"".join(base64.b64decode(line.audio_base_64) for line in lines)
    seconds = assert_speech(*decode_audio(audio, "pcm_16000"), all_text())
    chars = [c for line in lines if line.alignment for c in line.alignment.characters]
    segments = [segment for line in lines for segment in line.voice_segments or []]
    check_segments(segments, chars, inputs, seconds)


def test_bad_language_code_before_any_job(sdk, inputs):
    with pytest.raises(ApiError) as err:
        b"".join(sdk.text_to_dialogue.convert(inputs=inputs, language_code="de"))
    assert err.value.status_code == 400
    assert "does not support language_code 'de'" in err.value.body["detail"]["message"]


def post(front: str, body: object) -> httpx.Response:
    return httpx.post(f"{front}/v1/text-to-dialogue", json=body, headers={"xi-api-key": KEY}, timeout=60)


@pytest.mark.parametrize(
    ("count", "voices", "status", "code"),
    [
        (0, 1, 422, "invalid_parameters"),
        (11, 11, 400, "too_many_voices"),
        (101, 1, 400, "too_many_inputs"),
        (10_000, 1, 413, "request_too_large"),  # refused by the body bound before it is parsed
    ],
)
def test_hostile_input_counts(front, count, voices, status, code):
    body = {"inputs": [{"text": "Hi.", "voice_id": f"v{n % voices}"} for n in range(count)]}
    resp = post(front, body)
    assert resp.status_code == status, resp.text
    assert resp.json()["detail"]["code"] == code


def test_huge_texts_are_refused(front):
    body = {"inputs": [{"text": "word " * 100_000, "voice_id": "joe"}]}
    resp = post(front, body)
    assert resp.status_code in (400, 413)
    many = {"inputs": [{"text": "word " * 800, "voice_id": "joe"} for _ in range(10)]}
    resp = post(front, many)
    assert resp.status_code in (400, 413) and resp.json()["detail"]["code"] == "max_character_limit_exceeded"


def test_an_unknown_clone_among_known_voices_is_refused_before_any_job(front, inputs, redis_url):
    missing = "custom-" + "0" * 20
    body = {"inputs": [{"text": "Hello there.", "voice_id": "joe"}, {"text": "And you.", "voice_id": missing}]}
    resp = post(front, body)
    assert resp.status_code == 404, resp.text
    assert resp.json()["detail"]["code"] == "voice_not_found"


def test_an_unknown_plain_id_is_spoken_by_the_swap_out_voice(front):
    body = {"inputs": [{"text": "Hello there, my friend.", "voice_id": "Rachel-21m00Tcm4"}]}
    resp = httpx.post(
        f"{front}/v1/text-to-dialogue?output_format=pcm_16000", json=body, headers={"xi-api-key": KEY}, timeout=60
    )
    assert resp.status_code == 200
    assert_speech(*decode_audio(resp.content, "pcm_16000"), "Hello there, my friend.")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"inputs": None},
        {"inputs": "hello"},
        {"inputs": [{"text": "hi"}]},
        {"inputs": [{"voice_id": "joe"}]},
        {"inputs": [{"text": "  ", "voice_id": "joe"}]},
        {"inputs": [{"text": "hi", "voice_id": "joe"}], "seed": -1},
        {"inputs": [{"text": "hi", "voice_id": "joe"}], "settings": {"stability": "x"}},
    ],
)
def test_malformed_bodies(front, body):
    resp = post(front, body)
    assert resp.status_code in (400, 422), resp.text
    assert "detail" in resp.json()
