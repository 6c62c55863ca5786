"""Reference clips for the cloning tests, made at test time: real Piper speech, pitched up, in every upload format."""

from __future__ import annotations

import functools
import io

import numpy as np
import soundfile as sf

from workers.engines.base import VoiceSpec
from workers.engines.pitch import median_f0, pitch_shift

RATE = 22050
REFERENCE_SHIFT = 5.0  # semitones: a clearly higher voice than the engine's own
SPEECH_TEXT = (
    "Every morning the baker opens the shop before sunrise. "
    "Fresh bread fills the street with a warm smell, and the first customers wait at the door. "
    "By noon the shelves are empty, so he starts again for the evening."
)
FORMATS = {
    "wav": ("WAV", "PCM_16", "audio/wav"),
    "flac": ("FLAC", None, "audio/flac"),
    "ogg": ("OGG", "VORBIS", "audio/ogg"),
    "mp3": ("MP3", None, "audio/mpeg"),
}


@functools.cache
def piper_speech() -> np.ndarray:
    """About 12 s of the embedded engine's speech at 22.05 kHz (synthesized in this process, once)."""
    from workers.engines.piper import PiperEngine

    engine = PiperEngine(threads=1)
    chunks = engine.synthesize(SPEECH_TEXT, VoiceSpec("joe"), {"stability": 1.0}, lambda: False)
    pcm = np.concatenate([chunk.pcm for chunk in chunks]).astype(np.float32)
    assert 9.0 < len(pcm) / RATE < 16.0, len(pcm) / RATE
    return pcm


@functools.cache
def reference_pcm() -> np.ndarray:
    """The reference speaker: Piper speech shifted up by REFERENCE_SHIFT semitones, same duration."""
    return pitch_shift(piper_speech(), RATE, REFERENCE_SHIFT)


def encode(pcm: np.ndarray, fmt: str = "wav", rate: int = RATE) -> bytes:
    """Encode mono PCM as an upload in ``fmt`` (wav, flac, ogg or mp3)."""
    container, subtype, _ = FORMATS[fmt]
    out = io.BytesIO()
    sf.write(out, pcm, rate, format=container, subtype=subtype)
    return out.getvalue()


def reference_file(fmt: str = "wav") -> bytes:
    """The reference clip as an uploaded file."""
    return encode(reference_pcm(), fmt)


def pitch_of(pcm: np.ndarray, rate: int = RATE) -> float:
    """Median pitch of voiced frames, failing the test when there are none."""
    value = median_f0(pcm, rate)
    assert value is not None, "no voiced frames"
    return value


def flac_bomb(size: int, *, rate: int = 192000, channels: int = 8) -> bytes:
    """A FLAC file of about ``size`` bytes holding hours of silence in ``channels`` channels (a decode bomb).

    soundfile encodes a few blocks of silence; the first block (32 bytes for 8 channels of 4096 samples) is then
    repeated to fill ``size``, and STREAMINFO is set to the total.
    The repeated blocks share one frame number, so the file decodes front to back but cannot be seeked.
    """
    buf = io.BytesIO()
    sf.write(buf, np.zeros((4096 * 3, channels), dtype=np.int16), rate, format="FLAC", subtype="PCM_16")
    data = buf.getvalue()
    pos, info = 4, 0
    while True:  # metadata blocks: a header byte (last flag, type), a 24-bit length
        head, length = data[pos], int.from_bytes(data[pos + 1 : pos + 4], "big")
        if head & 0x7F == 0:
            info = pos + 4  # STREAMINFO
        pos += 4 + length
        if head & 0x80:
            break
    meta, frames = bytearray(data[:pos]), data[pos:]
    frame = frames[: frames.find(b"\xff\xf8", 2)]
    count = (size - len(meta)) // len(frame)
    total = count * 4096
    at = info + 13  # 36 bits of total samples: the low 4 bits of this byte and the next 4 bytes
    meta[at] = (meta[at] & 0xF0) | ((total >> 32) & 0x0F)
    meta[at + 1 : at + 5] = (total & 0xFFFFFFFF).to_bytes(4, "big")
    meta[info + 18 : info + 34] = bytes(16)  # no MD5 to check
    return bytes(meta) + frame * count
