"""Tests for zsynth.core.audio: output format parsing, G.711 and the incremental encoders."""

from __future__ import annotations

import io
import itertools
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf

from zsynth.core.audio import (
    ALLOWED_OUTPUT_FORMATS,
    DEFAULT_OUTPUT_FORMAT,
    Encoder,
    OutputFormat,
    OutputFormatError,
    alaw_to_int16,
    encode_all,
    float_to_int16,
    int16_to_alaw,
    int16_to_ulaw,
    parse_output_format,
    ulaw_to_int16,
)

pytestmark = pytest.mark.unit

IN_RATE = 22050
DURATION = 1.5
FREQ = 220.0
# Deliberately awkward sizes (including 0 and 1) so chunk borders land everywhere.
CHUNK_SIZES = (1, 0, 17, 4410, 333, 8191, 2, 1000, 12345, 77)


def sine(rate: int = IN_RATE, seconds: float = DURATION, amplitude: float = 0.5) -> npt.NDArray[np.int16]:
    t = np.arange(round(rate * seconds)) / rate
    return np.round(amplitude * 32767 * np.sin(2 * np.pi * FREQ * t)).astype(np.int16)


def uneven_chunks(x: npt.NDArray[np.int16]) -> Iterator[npt.NDArray[np.int16]]:
    pos = 0
    for size in itertools.cycle(CHUNK_SIZES):
        if pos >= x.size:
            return
        yield x[pos : pos + size]
        pos += size


def encode_chunked(fmt: OutputFormat, x: npt.NDArray[np.int16], rate: int = IN_RATE) -> bytes:
    enc = Encoder(fmt, rate)
    parts = [enc.encode(chunk) for chunk in uneven_chunks(x)]
    parts.append(enc.finish())
    return b"".join(parts)


def decode(fmt: OutputFormat, data: bytes) -> tuple[npt.NDArray[np.float64], int]:
    """Decode encoded bytes back to float samples and their sample rate."""
    if fmt.codec == "pcm":
        return np.frombuffer(data, dtype="<i2") / 32768.0, fmt.sample_rate
    if fmt.codec == "ulaw":
        return ulaw_to_int16(data) / 32768.0, fmt.sample_rate
    if fmt.codec == "alaw":
        return alaw_to_int16(data) / 32768.0, fmt.sample_rate
    samples, rate = sf.read(io.BytesIO(data), dtype="float64")
    assert samples.ndim == 1, "expected mono output"
    return samples, int(rate)


def dominant_frequency(x: npt.NDArray[np.float64], rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.argmax(spectrum)) * rate / x.size


# (format, allowed duration error in seconds). mp3 gets more: LAME adds ~1100 samples of encoder delay plus up to
# one frame of padding at the end, and without a LAME/Xing tag in a stream the decoder cannot trim them.
ROUND_TRIP_CASES = [
    ("mp3_22050_32", 0.1),
    ("mp3_24000_48", 0.1),
    ("mp3_44100_32", 0.1),
    ("mp3_44100_128", 0.1),
    ("mp3_44100_192", 0.1),
    ("pcm_8000", 0.06),
    ("pcm_16000", 0.06),
    ("pcm_22050", 0.06),
    ("pcm_44100", 0.06),
    ("pcm_48000", 0.06),
    ("ulaw_8000", 0.06),
    ("alaw_8000", 0.06),
    ("opus_48000_32", 0.06),
    ("opus_48000_128", 0.06),
    ("wav_8000", 0.06),
    ("wav_22050", 0.06),
    ("wav_44100", 0.06),
    ("wav_48000", 0.06),
]


@pytest.mark.parametrize(("name", "tolerance"), ROUND_TRIP_CASES)
def test_round_trip(name: str, tolerance: float) -> None:
    fmt = parse_output_format(name)
    data = encode_chunked(fmt, sine())
    samples, rate = decode(fmt, data)

    assert rate == fmt.sample_rate
    assert abs(samples.size / rate - DURATION) <= tolerance, samples.size / rate
    assert abs(dominant_frequency(samples, rate) - FREQ) < 2.0
    # Level survives (catches scaling or byte order mistakes that would still keep the pitch).
    middle = samples[int(0.2 * rate) : int(1.3 * rate)]
    assert 0.8 < np.sqrt(np.mean(middle**2)) / (0.5 / np.sqrt(2)) < 1.2


@pytest.mark.parametrize("name", ["pcm_8000", "pcm_16000", "pcm_22050", "pcm_24000", "pcm_44100", "pcm_48000"])
def test_pcm_keeps_every_sample(name: str) -> None:
    fmt = parse_output_format(name)
    data = encode_chunked(fmt, sine())
    assert len(data) == 2 * round(DURATION * fmt.sample_rate)


def test_chunking_does_not_change_resampled_output() -> None:
    # Same result fed in awkward pieces or in one go: the resampler state carries across chunk borders.
    fmt = parse_output_format("pcm_44100")
    x = sine()
    chunked = np.frombuffer(encode_chunked(fmt, x), dtype="<i2").astype(np.int32)
    whole = np.frombuffer(encode_all(x, IN_RATE, fmt), dtype="<i2").astype(np.int32)
    assert chunked.size == whole.size
    # soxr's int16 output rounding may differ by an LSB or two between block splits; a click would be thousands.
    assert np.max(np.abs(chunked - whole)) <= 4


def test_passthrough_is_bit_exact() -> None:
    x = sine()
    assert encode_all(x, IN_RATE, parse_output_format("pcm_22050")) == x.astype("<i2").tobytes()


def test_float_input_matches_int16_input() -> None:
    fmt = parse_output_format("pcm_16000")
    x = sine()
    as_float = (x / 32767.0).astype(np.float32)
    a = np.frombuffer(encode_all(x, IN_RATE, fmt), dtype="<i2").astype(np.int32)
    b = np.frombuffer(encode_all(as_float, IN_RATE, fmt), dtype="<i2").astype(np.int32)
    assert a.size == b.size
    assert np.max(np.abs(a - b)) <= 1


def test_float_to_int16() -> None:
    x = np.array([0.0, 1.0, -1.0, 2.0, -2.0, 0.5, np.nan], dtype=np.float32)
    assert float_to_int16(x).tolist() == [0, 32767, -32767, 32767, -32768, 16384, 0]
    assert float_to_int16(x).dtype == np.int16


def test_encode_empty_returns_nothing() -> None:
    for name in ("mp3_44100_128", "pcm_16000", "ulaw_8000", "opus_48000_64", "wav_16000"):
        enc = Encoder(parse_output_format(name), IN_RATE)
        assert enc.encode(np.empty(0, dtype=np.int16)) == b""
        assert enc.encode(np.empty(0, dtype=np.float32)) == b""


def test_encode_after_finish_raises() -> None:
    enc = Encoder(parse_output_format("pcm_16000"), IN_RATE)
    enc.encode(sine())
    enc.finish()
    assert enc.finish() == b""
    with pytest.raises(RuntimeError):
        enc.encode(sine())


def test_rejects_bad_input() -> None:
    enc = Encoder(parse_output_format("pcm_16000"), IN_RATE)
    with pytest.raises(ValueError):
        enc.encode(np.zeros((10, 2), dtype=np.int16))
    with pytest.raises(TypeError):
        enc.encode(np.zeros(10, dtype=np.int64))
    with pytest.raises(ValueError):
        Encoder(parse_output_format("pcm_16000"), 0)


def test_mp3_is_streamable() -> None:
    fmt = parse_output_format("mp3_44100_128")
    enc = Encoder(fmt, IN_RATE)
    x = sine(seconds=1.2)
    early = b"".join(enc.encode(chunk) for chunk in np.array_split(x, 12))
    assert len(early) > 1000  # bytes come out before finish()
    # What has been sent so far is already playable on its own.
    samples, rate = sf.read(io.BytesIO(early))
    assert rate == 44100
    assert samples.size > 0.5 * rate
    assert len(enc.finish()) > 0


def test_opus_emits_pages_before_finish() -> None:
    enc = Encoder(parse_output_format("opus_48000_64"), IN_RATE)
    early = b"".join(enc.encode(chunk) for chunk in np.array_split(sine(seconds=3.0), 30))
    assert early.startswith(b"OggS")
    assert len(early) > 5000  # audio pages, not just the two header pages
    rest = enc.finish()
    samples, rate = sf.read(io.BytesIO(early + rest))
    assert rate == 48000
    assert abs(samples.size / rate - 3.0) < 0.06


def test_opus_bitrate_is_roughly_honoured() -> None:
    rng = np.random.default_rng(1)
    noise = (rng.standard_normal(IN_RATE * 4) * 6000).astype(np.int16)
    sizes = {kbps: len(encode_all(noise, IN_RATE, parse_output_format(f"opus_48000_{kbps}"))) for kbps in (32, 128)}
    for kbps, size in sizes.items():
        assert 0.7 * kbps < size * 8 / 4 / 1000 < 1.3 * kbps


def test_wav_is_emitted_at_finish() -> None:
    fmt = parse_output_format("wav_16000")
    enc = Encoder(fmt, IN_RATE)
    assert all(enc.encode(chunk) == b"" for chunk in uneven_chunks(sine()))
    data = enc.finish()
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    info = sf.info(io.BytesIO(data))
    assert (info.samplerate, info.channels, info.subtype, info.frames) == (16000, 1, "PCM_16", 24000)


def test_empty_streams_are_valid() -> None:
    wav = encode_all(np.empty(0, dtype=np.int16), IN_RATE, parse_output_format("wav_24000"))
    assert len(wav) == 44 and sf.info(io.BytesIO(wav)).frames == 0
    for name in ("pcm_24000", "ulaw_8000", "mp3_44100_128", "mp3_22050_32"):
        assert encode_all(np.empty(0, dtype=np.int16), IN_RATE, parse_output_format(name)) == b""


def test_tiny_input_is_not_lost() -> None:
    # Fewer samples than one resampler block or MP3 frame still come out at finish().
    for name in ("pcm_44100", "mp3_44100_128", "opus_48000_64", "ulaw_8000"):
        data = encode_all(np.full(10, 1000, dtype=np.int16), IN_RATE, parse_output_format(name))
        assert data
    assert len(encode_all(np.full(10, 1000, dtype=np.int16), IN_RATE, parse_output_format("pcm_44100"))) == 40


# --- output format parsing ---------------------------------------------------------------------------------------


def test_default_format() -> None:
    for route in ("convert", "stream", "websocket"):
        for value in (None, ""):
            fmt = parse_output_format(value, route=route)
            assert fmt.name == DEFAULT_OUTPUT_FORMAT == "mp3_44100_128"
            assert (fmt.codec, fmt.sample_rate, fmt.bitrate_kbps) == ("mp3", 44100, 128)


def test_parsed_fields() -> None:
    assert parse_output_format("pcm_24000") == OutputFormat("pcm_24000", "pcm", 24000, None)
    assert parse_output_format("opus_48000_96") == OutputFormat("opus_48000_96", "opus", 48000, 96)
    assert parse_output_format("ulaw_8000", route="websocket").codec == "ulaw"
    assert parse_output_format("wav_44100").codec == "wav"


def test_media_types() -> None:
    expected = {
        "mp3_44100_128": "audio/mpeg",
        "pcm_16000": "audio/pcm",
        "ulaw_8000": "audio/basic",
        "alaw_8000": "audio/x-alaw-basic",
        "opus_48000_64": "audio/ogg",
        "wav_16000": "audio/wav",
    }
    for name, media_type in expected.items():
        assert parse_output_format(name).media_type == media_type


def test_every_listed_format_parses_and_encodes() -> None:
    x = sine(seconds=0.1)
    for route, names in ALLOWED_OUTPUT_FORMATS.items():
        for name in names:
            fmt = parse_output_format(name, route=route)
            assert fmt.name == name
            assert fmt.media_type.startswith("audio/")
            assert encode_all(x, IN_RATE, fmt)


def test_wav_only_on_convert() -> None:
    assert parse_output_format("wav_22050", route="convert").codec == "wav"
    for route in ("stream", "websocket"):
        with pytest.raises(OutputFormatError):
            parse_output_format("wav_22050", route=route)


def test_route_differences() -> None:
    assert parse_output_format("pcm_32000", route="stream").sample_rate == 32000
    assert parse_output_format("mp3_24000_48", route="stream").bitrate_kbps == 48
    for name in ("pcm_32000", "pcm_48000", "mp3_24000_48"):
        with pytest.raises(OutputFormatError):
            parse_output_format(name, route="websocket")


def test_websocket_alias() -> None:
    fmt = parse_output_format("mp3_44100", route="websocket")
    assert fmt.name == "mp3_44100_128"
    assert fmt.bitrate_kbps == 128
    for route in ("convert", "stream"):
        with pytest.raises(OutputFormatError):
            parse_output_format("mp3_44100", route=route)


@pytest.mark.parametrize("value", ["mp3_1_2", "mp3_44100_320", "flac_44100", "MP3_44100_128", "pcm", "wav"])
def test_unknown_formats_rejected(value: str) -> None:
    with pytest.raises(OutputFormatError) as info:
        parse_output_format(value)
    message = str(info.value)
    assert repr(value) in message
    for family in ("mp3", "pcm", "ulaw", "alaw", "opus", "wav"):
        assert family in message
    assert isinstance(info.value, ValueError)


def test_error_lists_only_route_families() -> None:
    with pytest.raises(OutputFormatError) as info:
        parse_output_format("wav_16000", route="stream")
    assert "wav" not in str(info.value).replace("'wav_16000'", "")


def test_unknown_route_is_not_a_client_error() -> None:
    with pytest.raises(ValueError) as info:
        parse_output_format("pcm_16000", route="grpc")
    assert not isinstance(info.value, OutputFormatError)


# --- G.711 ---------------------------------------------------------------------------------------------------------


def test_g711_known_codes() -> None:
    # Anchors from G.711/G.191: silence, the smallest negative value, and both full-scale ends.
    x = np.array([0, -1, 32767, -32768], dtype=np.int16)
    assert int16_to_ulaw(x).tolist() == [0xFF, 0x7F, 0x80, 0x00]
    assert int16_to_alaw(x).tolist() == [0xD5, 0x55, 0xAA, 0x2A]
    assert ulaw_to_int16(bytes([0xFF, 0x7F, 0x80, 0x00])).tolist() == [0, 0, 32124, -32124]
    assert alaw_to_int16(bytes([0xD5, 0x55, 0xAA, 0x2A])).tolist() == [8, -8, 32256, -32256]


G711Codec = tuple[Callable[[npt.NDArray[np.int16]], npt.NDArray[np.uint8]], Callable[[bytes], npt.NDArray[np.int16]]]
G711: dict[str, G711Codec] = {"ulaw": (int16_to_ulaw, ulaw_to_int16), "alaw": (int16_to_alaw, alaw_to_int16)}


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_g711_round_trip(law: str) -> None:
    encode, decode = G711[law]
    x = np.arange(-32768, 32768, dtype=np.int16)
    y = decode(encode(x).tobytes()).astype(np.int32)
    x32 = x.astype(np.int32)
    # Logarithmic quantiser: the error stays within half a step, a few percent of the value (plus a floor).
    assert np.all(np.abs(y - x32) <= np.maximum(0.035 * np.abs(x32), 16) + 1)
    # Monotonic: a louder input never decodes quieter.
    assert np.all(np.diff(y) >= 0)
    # Every code decodes to a level that re-encodes to the same code, except mu-law's "negative zero" 0x7F,
    # which decodes to 0 like 0xFF does.
    codes = np.arange(256, dtype=np.uint8)
    expected = codes.copy()
    if law == "ulaw":
        expected[0x7F] = 0xFF
    assert np.array_equal(encode(decode(codes.tobytes())), expected)
    # Signal-to-noise on a half-scale tone is what G.711 promises (about 38 dB).
    s = sine(rate=8000)
    noise = decode(encode(s).tobytes()).astype(np.float64) - s
    snr = 10 * np.log10(np.mean(s.astype(np.float64) ** 2) / np.mean(noise**2))
    assert snr > 33


def test_g711_matches_stdlib_reference() -> None:
    # audioop (deprecated, gone in 3.13) is an independent implementation: its A-law coder and both decoders use
    # the same conventions as ours; its mu-law coder differs only for negative inputs (Sun's x >> 2 vs G.191's ~x).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")
    x = np.arange(-32768, 32768, dtype=np.int16)
    codes = np.arange(256, dtype=np.uint8).tobytes()
    assert int16_to_alaw(x).tobytes() == audioop.lin2alaw(x.tobytes(), 2)
    ref_ulaw = np.frombuffer(audioop.lin2ulaw(x.tobytes(), 2), dtype=np.uint8)
    assert np.array_equal(int16_to_ulaw(x)[x >= 0], ref_ulaw[x >= 0])
    assert ulaw_to_int16(codes).tobytes() == audioop.ulaw2lin(codes, 2)
    assert alaw_to_int16(codes).tobytes() == audioop.alaw2lin(codes, 2)
