"""The OpenAI speech API's ``response_format`` values, and the front-side encoders the worker formats lack.

mp3 and opus come straight from the worker (ElevenLabs' ``mp3_44100_128`` and ``opus_48000_64``). wav, pcm, aac
and flac are made in the front from the worker's ``pcm_24000`` (24 kHz, 16-bit, mono, OpenAI's pcm rate):

* pcm: the worker's bytes unchanged.
* wav: a RIFF header whose sizes say "unknown" (0xFFFFFFFF, as streamed WAV from OpenAI), then the samples as they
  come; libsndfile, ffmpeg and browsers read it.
* aac: AAC-LC in ADTS frames (PyAV, libavcodec's encoder), streamed; each ADTS frame stands alone. PyAV is imported
  on the first aac response only: a front without it serves every other format and refuses aac (:func:`usable`).
* flac: libsndfile's FLAC encoder. A FLAC header carries the stream's length and checksum, and decoders such as
  libsndfile refuse a stream without them, so flac is sent whole once the audio is complete.

Measured CPU per second of 24 kHz mono audio: wav and pcm nothing, flac about 0.4 ms (run on the event loop), aac
about 5 ms, 6 ms more for the encoder's first chunk (``threaded``: the route runs it in a thread so the event loop
stays free for other streams).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np
import soundfile as sf

from zsynth.core.optional import available, load

RATE: Final = 24000
MIN_SPEED: Final = 0.25
MAX_SPEED: Final = 4.0
STREAM_FORMATS: Final = ("audio", "sse")


class ChunkEncoder(Protocol):
    """Worker audio in, response bytes out (maybe b"" until finish)."""

    def encode(self, audio: bytes) -> bytes:
        """Encode one chunk from the worker."""
        ...

    def finish(self) -> bytes:
        """Flush and return the rest."""
        ...


class _Passthrough:
    """The worker already made the format (mp3, opus, pcm)."""

    def encode(self, audio: bytes) -> bytes:
        return audio

    def finish(self) -> bytes:
        return b""


class _StreamedWav:
    """16-bit mono WAV with unknown-length header sizes, sent ahead of the first samples."""

    def __init__(self) -> None:
        self._header: bytes | None = struct.pack(
            "<4sI4s4sIHHIIHH4sI",
            b"RIFF",
            0xFFFFFFFF,
            b"WAVE",
            b"fmt ",
            16,
            1,  # PCM
            1,  # mono
            RATE,
            RATE * 2,
            2,
            16,
            b"data",
            0xFFFFFFFF,
        )

    def encode(self, audio: bytes) -> bytes:
        header, self._header = self._header, None
        return header + audio if header else audio

    def finish(self) -> bytes:
        header, self._header = self._header, None
        return header or b""


class _Aac:
    """AAC-LC at 64 kbit/s in ADTS, through PyAV."""

    def __init__(self) -> None:
        self._av: Any = load("av", "response_format aac")
        self._sink = io.BytesIO()
        self._container = self._av.open(self._sink, "w", format="adts")
        self._stream = self._container.add_stream("aac", rate=RATE)
        self._stream.layout = "mono"
        self._stream.bit_rate = 64000

    def _drain(self) -> bytes:
        out = self._sink.getvalue()
        self._sink.seek(0)
        self._sink.truncate()
        return out

    def encode(self, audio: bytes) -> bytes:
        samples = np.frombuffer(audio, dtype="<i2").reshape(1, -1)
        if samples.size == 0:
            return b""
        frame = self._av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = RATE
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return self._drain()

    def finish(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._drain()


class _Flac:
    """Lossless FLAC (libsndfile), written to memory and sent at the end with a complete header."""

    def __init__(self) -> None:
        self._sink = io.BytesIO()
        self._file = sf.SoundFile(self._sink, mode="w", samplerate=RATE, channels=1, format="FLAC", subtype="PCM_16")

    def encode(self, audio: bytes) -> bytes:
        if audio:
            self._file.write(np.frombuffer(audio, dtype="<i2"))
        return b""

    def finish(self) -> bytes:
        self._file.close()
        return self._sink.getvalue()


#: The libraries a format needs beyond the front's own (imported on its first use).
NEEDS: Final = {"aac": ("av", "PyAV")}


def usable(name: str) -> str | None:
    """Why ``name`` cannot be served here (a library it needs does not import), or None when it can."""
    need = NEEDS.get(name)
    if need is None or available(need[0]):
        return None
    served = ", ".join(fmt for fmt in RESPONSE_FORMATS if fmt not in NEEDS)
    return f"response_format {name!r} needs {need[1]}, which this server lacks: use one of {served}."


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """One ``response_format``: what the worker makes, what the client gets."""

    name: str
    worker_format: str
    media_type: str
    threaded: bool = False

    def encoder(self) -> ChunkEncoder:
        """A fresh encoder for one response."""
        if self.name == "wav":
            return _StreamedWav()
        if self.name == "aac":
            return _Aac()
        if self.name == "flac":
            return _Flac()
        return _Passthrough()


RESPONSE_FORMATS: Final = {
    fmt.name: fmt
    for fmt in (
        ResponseFormat("mp3", "mp3_44100_128", "audio/mpeg"),
        ResponseFormat("opus", "opus_48000_64", "audio/ogg"),
        ResponseFormat("aac", "pcm_24000", "audio/aac", threaded=True),
        ResponseFormat("flac", "pcm_24000", "audio/flac"),
        ResponseFormat("wav", "pcm_24000", "audio/wav"),
        ResponseFormat("pcm", "pcm_24000", "audio/pcm"),
    )
}
