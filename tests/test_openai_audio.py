"""The OpenAI response formats' front-side encoders, fed the worker's pcm_24000 chunk by chunk."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
import soundfile as sf

from zsynth.core.audio import parse_output_format
from zsynth.speech.openai_audio import RATE, RESPONSE_FORMATS

pytestmark = pytest.mark.unit


def tone_chunks(seconds: float = 2.0, chunk_s: float = 0.5) -> list[bytes]:
    """A 220 Hz tone in worker-sized pcm_24000 chunks (s16le)."""
    t = np.arange(int(seconds * RATE)) / RATE
    pcm = (np.sin(2 * np.pi * 220 * t) * 12000).astype("<i2")
    step = int(chunk_s * RATE)
    return [pcm[i : i + step].tobytes() for i in range(0, len(pcm), step)]


def encode(name: str) -> tuple[list[bytes], bytes]:
    encoder = RESPONSE_FORMATS[name].encoder()
    pieces = [encoder.encode(chunk) for chunk in tone_chunks()]
    return pieces, encoder.finish()


def decoded_seconds(name: str, data: bytes) -> float:
    if name == "pcm":
        return len(data) / 2 / RATE
    if name == "aac":
        with av.open(io.BytesIO(data), "r") as container:
            return sum(frame.samples for frame in container.decode(audio=0)) / RATE
    samples, rate = sf.read(io.BytesIO(data), dtype="float32")
    assert rate == RATE
    return len(samples) / rate


@pytest.mark.parametrize("name", ["pcm", "wav", "aac", "flac"])
def test_front_encoded_formats_decode_to_the_whole_input(name):
    pieces, tail = encode(name)
    assert decoded_seconds(name, b"".join(pieces) + tail) == pytest.approx(2.0, abs=0.1)


@pytest.mark.parametrize("name", ["pcm", "wav", "aac"])
def test_streamed_formats_send_audio_before_the_end(name):
    pieces, _ = encode(name)
    assert pieces[0] and all(pieces[1:]), [len(p) for p in pieces]


def test_wav_header_says_unknown_length_and_comes_once():
    pieces, tail = encode("wav")
    body = b"".join(pieces) + tail
    assert body[:4] == b"RIFF" and body[4:8] == b"\xff\xff\xff\xff" and body[40:44] == b"\xff\xff\xff\xff"
    assert body.count(b"RIFF") == 1 and len(body) == 44 + 2 * 2 * RATE


def test_flac_comes_whole_at_the_end_with_its_length():
    pieces, tail = encode("flac")
    assert not any(pieces)
    assert sf.info(io.BytesIO(tail)).frames == 2 * RATE


def test_worker_formats_exist_for_every_response_format():
    assert set(RESPONSE_FORMATS) == {"mp3", "opus", "aac", "flac", "wav", "pcm"}  # OpenAI's six
    for fmt in RESPONSE_FORMATS.values():
        parse_output_format(fmt.worker_format, route="stream")
        assert fmt.media_type.startswith("audio/")
