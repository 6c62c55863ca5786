"""Output formats and audio encoding shared by the web front and the workers.

Everything here works on mono audio. The synthesis side produces int16 (or float32 in -1..1) PCM at the
model's native rate; :class:`Encoder` resamples it with soxr and encodes it, chunk by chunk, into one of the
ElevenLabs ``output_format`` values that :func:`parse_output_format` accepts.

This module must stay free of web/queue dependencies (aiohttp, redis): both process kinds import it.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import lameenc
import numpy as np
import numpy.typing as npt
import soundfile as sf
import soxr

__all__ = [
    "ALLOWED_OUTPUT_FORMATS",
    "DEFAULT_OUTPUT_FORMAT",
    "Encoder",
    "OutputFormat",
    "OutputFormatError",
    "alaw_to_int16",
    "encode_all",
    "float_to_int16",
    "int16_to_alaw",
    "int16_to_ulaw",
    "parse_output_format",
    "ulaw_to_int16",
]

Int16Array = npt.NDArray[np.int16]
UInt8Array = npt.NDArray[np.uint8]

DEFAULT_OUTPUT_FORMAT: Final = "mp3_44100_128"

# ---------------------------------------------------------------------------------------------------------------------
# Output format names
# ---------------------------------------------------------------------------------------------------------------------

_MP3_HTTP: Final = (
    "mp3_22050_32",
    "mp3_24000_48",
    "mp3_44100_32",
    "mp3_44100_64",
    "mp3_44100_96",
    "mp3_44100_128",
    "mp3_44100_192",
)
_OPUS: Final = ("opus_48000_32", "opus_48000_64", "opus_48000_96", "opus_48000_128", "opus_48000_192")
_PCM_HTTP: Final = ("pcm_8000", "pcm_16000", "pcm_22050", "pcm_24000", "pcm_32000", "pcm_44100", "pcm_48000")
_WAV: Final = ("wav_8000", "wav_16000", "wav_22050", "wav_24000", "wav_32000", "wav_44100", "wav_48000")

_STREAM: Final = ("alaw_8000", *_MP3_HTTP, *_OPUS, *_PCM_HTTP, "ulaw_8000")

#: Allowed ``output_format`` values per route, mirroring the ElevenLabs API lists.
ALLOWED_OUTPUT_FORMATS: Final[Mapping[str, tuple[str, ...]]] = {
    # Non-streaming HTTP: the only route that may buffer a whole response, hence the only one with wav.
    "convert": (*_STREAM, *_WAV),
    "stream": _STREAM,
    "websocket": (
        "mp3_22050_32",
        "mp3_44100_32",
        "mp3_44100_64",
        "mp3_44100_96",
        "mp3_44100_128",
        "mp3_44100_192",
        "pcm_8000",
        "pcm_16000",
        "pcm_22050",
        "pcm_24000",
        "pcm_44100",
        "ulaw_8000",
        "alaw_8000",
        *_OPUS,
    ),
}

# Short names accepted on top of the canonical list, per route.
_ALIASES: Final[Mapping[str, Mapping[str, str]]] = {
    "convert": {},
    "stream": {},
    "websocket": {"mp3_44100": "mp3_44100_128"},
}

_MEDIA_TYPES: Final[Mapping[str, str]] = {
    "mp3": "audio/mpeg",
    "pcm": "audio/pcm",
    # audio/basic is the registered type for 8 kHz mono mu-law (RFC 2046).
    "ulaw": "audio/basic",
    # A-law has no registered file media type; audio/x-alaw-basic is the conventional counterpart of audio/basic.
    "alaw": "audio/x-alaw-basic",
    "opus": "audio/ogg",
    "wav": "audio/wav",
}


class OutputFormatError(ValueError):
    """An ``output_format`` value that the route does not support (the message is safe to show to users)."""

    def __init__(self, value: str, route: str) -> None:
        self.value = value
        self.route = route
        allowed = ALLOWED_OUTPUT_FORMATS[route]
        families: dict[str, list[str]] = {}
        for name in (*allowed, *_ALIASES[route]):
            families.setdefault(name.split("_", 1)[0], []).append(name)
        listing = "; ".join(f"{family}: {', '.join(names)}" for family, names in families.items())
        super().__init__(
            f"Unsupported output_format {value!r}. Allowed families are {', '.join(families)} ({listing})."
        )


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """A parsed, canonical output format."""

    name: str
    codec: str
    sample_rate: int
    bitrate_kbps: int | None

    @property
    def media_type(self) -> str:
        """Return the Content-Type for a response body in this format."""
        return _MEDIA_TYPES[self.codec]

    @property
    def bytes_per_second(self) -> int:
        """About how many bytes one second of audio takes in this format (flow control sizes its windows by it)."""
        if self.bitrate_kbps is not None:  # mp3, opus: their bitrate (framing adds a little)
            return self.bitrate_kbps * 125
        if self.codec in ("ulaw", "alaw"):
            return self.sample_rate
        return 2 * self.sample_rate  # 16-bit mono: pcm, wav


def _format_from_name(name: str) -> OutputFormat:
    parts = name.split("_")
    bitrate = int(parts[2]) if len(parts) > 2 else None
    return OutputFormat(name=name, codec=parts[0], sample_rate=int(parts[1]), bitrate_kbps=bitrate)


# Built once so parsing a request is a dict lookup.
_PARSED: Final[Mapping[str, Mapping[str, OutputFormat]]] = {
    route: {
        **{name: _format_from_name(name) for name in names},
        **{alias: _format_from_name(target) for alias, target in _ALIASES[route].items()},
    }
    for route, names in ALLOWED_OUTPUT_FORMATS.items()
}


def parse_output_format(value: str | None, *, route: str = "convert") -> OutputFormat:
    """Validate an ``output_format`` for a route ("convert", "stream" or "websocket"); None/"" mean the default."""
    try:
        table = _PARSED[route]
    except KeyError:
        # A programming error, not a client one, so it must not look like an OutputFormatError.
        raise ValueError(f"unknown route {route!r}") from None
    fmt = table.get(value or DEFAULT_OUTPUT_FORMAT)
    if fmt is None:
        raise OutputFormatError(str(value), route)
    return fmt


# ---------------------------------------------------------------------------------------------------------------------
# Sample conversion and G.711
# ---------------------------------------------------------------------------------------------------------------------


def float_to_int16(x: npt.NDArray[np.floating]) -> Int16Array:
    """Convert float samples in -1..1 to int16 (clipped, rounded; NaN becomes 0)."""
    # One float32 scratch buffer, then everything in place: this runs on every chunk.
    y: npt.NDArray[np.float32] = np.multiply(x, np.float32(32767.0), dtype=np.float32)
    np.nan_to_num(y, copy=False, nan=0.0)
    np.clip(y, -32768.0, 32767.0, out=y)
    np.rint(y, out=y)
    return y.astype(np.int16)


def _build_ulaw_table() -> UInt8Array:
    # G.711 mu-law on a 16-bit scale: the 14-bit bias of 33 becomes 132 and the 14-bit ceiling 8191 becomes 32767.
    # Negative values use the one's complement magnitude (~x), as the ITU G.191 reference coder does, so the
    # quantiser is symmetric and -1 codes like 0.
    x = np.arange(-32768, 32768, dtype=np.int32)
    negative = x < 0
    sign = np.where(negative, 0x80, 0x00)
    biased = np.minimum(np.where(negative, ~x, x) + 132, 32767)  # 132 .. 32767: the top bit is bit 7 .. bit 14
    exponent = np.frexp(biased.astype(np.float64))[1] - 8  # floor(log2(biased)) - 7, in 0..7
    mantissa = (biased >> (exponent + 3)) & 0x0F
    code = ~(sign | (exponent << 4) | mantissa) & 0xFF  # G.711 transmits mu-law with all bits inverted
    # Reorder so the table is indexed by the int16 bit pattern read as uint16.
    return np.roll(code.astype(np.uint8), -32768)


def _build_alaw_table() -> UInt8Array:
    # G.711 A-law works on 13-bit samples; negative values use the one's complement magnitude (~x) as in G.191.
    x = np.arange(-32768, 32768, dtype=np.int32) >> 3
    negative = x < 0
    magnitude = np.where(negative, ~x, x)  # 0 .. 4095
    top_bit = np.frexp(np.maximum(magnitude, 1).astype(np.float64))[1] - 1  # floor(log2(m))
    segment = np.maximum(top_bit - 4, 0)  # segments 0 and 1 both step by 2
    mantissa = (magnitude >> np.maximum(segment, 1)) & 0x0F
    code = (np.where(negative, 0x00, 0x80) | (segment << 4) | mantissa) ^ 0x55  # even bits inverted on the line
    return np.roll(code.astype(np.uint8), -32768)


def _build_ulaw_decode_table() -> Int16Array:
    code = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent = (code >> 4) & 0x07
    mantissa = code & 0x0F
    magnitude = (((mantissa << 3) + 132) << exponent) - 132
    return np.where(code & 0x80, -magnitude, magnitude).astype(np.int16)


def _build_alaw_decode_table() -> Int16Array:
    code = np.arange(256, dtype=np.int32) ^ 0x55
    segment = (code >> 4) & 0x07
    mantissa = code & 0x0F
    # Decode to the middle of each quantisation interval, scaled from 13 to 16 bits.
    magnitude = np.where(segment == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(segment - 1, 0))
    return np.where(code & 0x80, magnitude, -magnitude).astype(np.int16)


# 64 KiB lookup tables make encoding a single fancy-indexing pass, far cheaper than recomputing segments per sample.
_ULAW_ENCODE: Final = _build_ulaw_table()
_ALAW_ENCODE: Final = _build_alaw_table()
_ULAW_DECODE: Final = _build_ulaw_decode_table()
_ALAW_DECODE: Final = _build_alaw_decode_table()


def int16_to_ulaw(pcm: Int16Array) -> UInt8Array:
    """Encode int16 samples as G.711 mu-law bytes."""
    return _ULAW_ENCODE[np.asarray(pcm, dtype=np.int16).view(np.uint16)]


def int16_to_alaw(pcm: Int16Array) -> UInt8Array:
    """Encode int16 samples as G.711 A-law bytes."""
    return _ALAW_ENCODE[np.asarray(pcm, dtype=np.int16).view(np.uint16)]


def ulaw_to_int16(data: bytes | bytearray | memoryview | UInt8Array) -> Int16Array:
    """Decode G.711 mu-law bytes to int16 samples."""
    return _ULAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def alaw_to_int16(data: bytes | bytearray | memoryview | UInt8Array) -> Int16Array:
    """Decode G.711 A-law bytes to int16 samples."""
    return _ALAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def _as_int16(pcm: npt.NDArray[np.generic]) -> Int16Array:
    if pcm.ndim != 1:
        raise ValueError(f"expected mono 1-D audio, got shape {pcm.shape}")
    if pcm.dtype.kind == "i" and pcm.dtype.itemsize == 2:
        # No copy for the usual native, contiguous int16; soxr and the byte views below need contiguous data.
        return np.ascontiguousarray(pcm, dtype=np.int16)
    if pcm.dtype.kind == "f":
        return float_to_int16(pcm)  # type: ignore[arg-type]  # numpy's types cannot narrow on dtype.kind
    raise TypeError(f"expected int16 or float samples, got {pcm.dtype}")


# ---------------------------------------------------------------------------------------------------------------------
# Encoders
# ---------------------------------------------------------------------------------------------------------------------

# LAME -q 3 is about 2.5x faster than -q 2 with no audible difference for speech; 0 (best) .. 9 (worst).
_LAME_QUALITY: Final = 3

_LITTLE_ENDIAN: Final = sys.byteorder == "little"


def _le_bytes(samples: Int16Array) -> bytes:
    # pcm_* and wav are little-endian on the wire whatever the host is.
    return samples.tobytes() if _LITTLE_ENDIAN else samples.astype("<i2").tobytes()


class _AppendOnlySink:
    """Write-only file object for libsndfile that hands out what was written since the last drain."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._pos = 0
        self.bad_seek = False

    def write(self, data: bytes) -> int:
        self._chunks.append(data)
        self._pos += len(data)
        return len(data)

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        # libsndfile only probes the length (seek to end and back), which is a no-op on an append-only stream.
        # A real seek backwards would mean it wants to patch bytes we already sent; flag it rather than raise,
        # because an exception inside the cffi callback would be swallowed.
        target = offset if whence == 0 else self._pos + offset
        if target != self._pos:
            self.bad_seek = True
        return self._pos

    def read(self, size: int = -1) -> bytes:
        return b""

    def drain(self) -> bytes:
        if not self._chunks:
            return b""
        out = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        return out


def _opus_compression_level(bitrate_kbps: int) -> float:
    # libsndfile's Ogg/Opus writer maps SFC_SET_COMPRESSION_LEVEL 0..1 linearly onto 256..6 kbit/s per channel
    # (VBR); it ignores SFC_SET_BITRATE_MODE for Opus. Measured: 32/64/128/192 -> about 31/67/132/196 kbit/s.
    return min(1.0, max(0.0, (256.0 - bitrate_kbps) / 250.0))


class Encoder:
    """Incremental encoder: int16 mono PCM at input_rate in, bytes in the output format out.

    Per codec:

    * pcm: raw signed 16-bit little-endian, no header; bytes come out as soon as the resampler releases samples.
    * ulaw/alaw: G.711, one byte per 8 kHz sample, no header.
    * mp3: LAME CBR at the format's bit rate and sample rate. Every returned piece is a run of whole MP3
      frames, so the concatenation so far is always playable.
    * opus: Ogg Opus at 48 kHz via libsndfile. The header pages come with the first audio, then libsndfile
      emits a page about every second of audio (Ogg page granularity); the rest comes at finish(). Bit rate is
      approximate (VBR via libsndfile's compression level).
    * wav: RIFF/WAVE 16-bit PCM. The header needs the data length, so everything is buffered and returned by
      finish(); encode() always returns b"".

    With no audio at all, mp3/pcm/ulaw/alaw give b"", wav a header-only file and opus just the Ogg header pages.

    finish() flushes the resampler and the codec; after it encode() raises RuntimeError and a second finish()
    returns b"".
    """

    def __init__(self, fmt: OutputFormat, input_rate: int) -> None:
        if input_rate <= 0:
            raise ValueError(f"input_rate must be positive, got {input_rate}")
        self.format = fmt
        self.input_rate = input_rate
        self._finished = False
        # soxr's streaming resampler keeps its filter state between calls, so chunk borders are seamless and
        # the total output length is exactly input * ratio once flushed.
        self._resampler: soxr.ResampleStream | None = (
            None
            if input_rate == fmt.sample_rate
            else soxr.ResampleStream(input_rate, fmt.sample_rate, 1, dtype="int16", quality="HQ")
        )
        self._lame: lameenc.Encoder | None = None
        self._lame_fed = False
        self._sink: _AppendOnlySink | None = None
        self._sf: sf.SoundFile | None = None
        self._wav: bytearray | None = None

        codec = fmt.codec
        if codec == "mp3":
            lame = lameenc.Encoder()
            lame.set_bit_rate(fmt.bitrate_kbps or 128)
            lame.set_in_sample_rate(fmt.sample_rate)
            # Without this LAME picks its own (lower) output rate for low bit rates, e.g. 22050 Hz for 44100/32k.
            lame.set_out_sample_rate(fmt.sample_rate)
            lame.set_channels(1)
            lame.set_quality(_LAME_QUALITY)
            self._lame = lame
        elif codec == "opus":
            self._sink = _AppendOnlySink()
            self._sf = sf.SoundFile(
                self._sink,
                mode="w",
                samplerate=fmt.sample_rate,
                channels=1,
                format="OGG",
                subtype="OPUS",
                compression_level=_opus_compression_level(fmt.bitrate_kbps or 64),
            )
        elif codec == "wav":
            self._wav = bytearray(44)  # header placeholder, filled in by finish()
        elif codec not in ("pcm", "ulaw", "alaw"):
            raise ValueError(f"unsupported codec {codec!r}")

    def encode(self, pcm: npt.NDArray[np.generic]) -> bytes:
        """Feed mono int16 (or float -1..1) samples; return the encoded bytes that are ready now (maybe b"")."""
        if self._finished:
            raise RuntimeError("Encoder.encode() called after finish()")
        if pcm.size == 0:
            return b""
        samples = _as_int16(pcm)
        if self._resampler is not None:
            samples = self._resampler.resample_chunk(samples)
        return self._emit(samples)

    def finish(self) -> bytes:
        """Flush the resampler and the codec and return the remaining bytes."""
        if self._finished:
            return b""
        self._finished = True
        out = b""
        if self._resampler is not None:
            out = self._emit(self._resampler.resample_chunk(np.empty(0, dtype=np.int16), last=True))
            self._resampler = None
        if self._lame is not None:
            # lameenc refuses to flush an encoder that never saw a sample; no audio simply means no frames.
            if self._lame_fed:
                out += bytes(self._lame.flush())
            self._lame = None
        elif self._sf is not None and self._sink is not None:
            self._sf.close()
            self._sf = None
            out += self._drain_sink()
        elif self._wav is not None:
            buf = self._wav
            self._wav = None
            data_len = len(buf) - 44
            rate = self.format.sample_rate
            struct.pack_into(
                "<4sI4s4sIHHIIHH4sI",
                buf,
                0,
                b"RIFF",
                36 + data_len,
                b"WAVE",
                b"fmt ",
                16,  # fmt chunk size
                1,  # WAVE_FORMAT_PCM
                1,  # channels
                rate,
                rate * 2,  # byte rate
                2,  # block align
                16,  # bits per sample
                b"data",
                data_len,
            )
            out += bytes(buf)
        return out

    def _emit(self, samples: Int16Array) -> bytes:
        if samples.size == 0:
            return b""
        codec = self.format.codec
        if codec == "pcm":
            return _le_bytes(samples)
        if codec == "ulaw":
            return int16_to_ulaw(samples).tobytes()
        if codec == "alaw":
            return int16_to_alaw(samples).tobytes()
        if self._lame is not None:
            # lameenc only takes a real bytes object, hence the copy.
            self._lame_fed = True
            return bytes(self._lame.encode(samples.tobytes()))
        if self._sf is not None:
            self._sf.write(samples)
            return self._drain_sink()
        if self._wav is not None:
            if _LITTLE_ENDIAN:
                self._wav += samples.data.cast("B")  # straight into the buffer, no temporary bytes
            else:
                self._wav += _le_bytes(samples)
            return b""
        raise RuntimeError("encoder is in an inconsistent state")

    def _drain_sink(self) -> bytes:
        assert self._sink is not None
        if self._sink.bad_seek:
            raise RuntimeError("libsndfile tried to seek back in a streamed Ogg file")
        return self._sink.drain()


def encode_all(pcm: npt.NDArray[np.generic], input_rate: int, fmt: OutputFormat) -> bytes:
    """Encode a whole mono clip in one go."""
    encoder = Encoder(fmt, input_rate)
    head = encoder.encode(pcm)
    tail = encoder.finish()
    return head + tail if head else tail
