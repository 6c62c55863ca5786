"""Reference clips for cloning: decode WAV, FLAC, Ogg and MP3, downmix to mono, and refuse what cannot clone."""

from __future__ import annotations

import hashlib
import io
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

import numpy as np
import soundfile as sf
import soxr

from zsynth.core.codes import ApiCode, CodedError

MIN_SECONDS: Final = 5.0
# Silence put between the clips of one reference.
GAP_SECONDS: Final = 0.3
MAX_SECONDS: Final = 60.0
# Checked on the file's header before anything is decoded (a few kilobytes of FLAC can claim hours of 8 channels):
MAX_CHANNELS: Final = 8
MAX_RATE: Final = 192000
# Decoding goes in blocks of this many seconds, each mixed down and resampled before the next is read, so the memory a
# clip takes is bounded by MAX_SECONDS of mono at STORE_RATE whatever its header claims.
_BLOCK_S: Final = 0.5
# Every reference is stored at one rate: engines resample from it (Chatterbox conditions at 16 and 24 kHz).
STORE_RATE: Final = 24000
# 20 ms frames louder than -40 dBFS count as sound; a clone needs a few seconds of it.
_FRAME_S: Final = 0.02
_ACTIVE_RMS: Final = 0.01
MIN_ACTIVE_SECONDS: Final = 2.0
ADVICE: Final = "Send about 10-20 seconds of clean single-speaker speech as WAV, FLAC, Ogg or MP3."

_MIME_BY_FORMAT: Final = {"WAV": "audio/wav", "FLAC": "audio/flac", "OGG": "audio/ogg", "MP3": "audio/mpeg"}


class ClipError(CodedError, ValueError):
    """A reference clip was refused; ``code`` is the API status, the message says what to send."""


@dataclass(slots=True)
class Clip:
    """One decoded upload."""

    file_name: str
    mime_type: str
    size_bytes: int
    sha256: str
    pcm: np.ndarray  # mono float32 at STORE_RATE

    @property
    def duration(self) -> float:
        """Seconds of audio."""
        return len(self.pcm) / STORE_RATE

    def sample(self) -> dict[str, Any]:
        """The ElevenLabs ``samples`` entry describing this upload."""
        return {
            "sample_id": secrets.token_hex(10),
            "file_name": self.file_name,
            "mime_type": self.mime_type,
            "size_bytes": self.size_bytes,
            "hash": self.sha256,
            "duration_secs": round(self.duration, 3),
            "remove_background_noise": False,
            "has_isolated_audio": False,
            "has_isolated_audio_preview": False,
            "speaker_separation": None,
            "trim_start": None,
            "trim_end": None,
        }


class _ForwardReader(sf.SoundFile):  # type: ignore[misc]  # soundfile ships no types
    """A SoundFile read front to back only: soundfile otherwise seeks to where it already is after every read, which
    restarts the MP3 decoder mid-stream (a glitch at every block boundary)."""

    def seekable(self) -> bool:
        """Never: reads go forward, one block after another."""
        return False


@dataclass(frozen=True, slots=True)
class ClipHeader:
    """What a clip's header claims, read without decoding any audio."""

    channels: int
    rate: int
    frames: int

    @property
    def seconds(self) -> float:
        """The length the header claims."""
        return self.frames / self.rate


def check_size(size: int, file_name: str, max_bytes: int) -> None:
    """Refuse (ClipError) an empty clip or one over ``max_bytes`` (ZSYNTH_VOICE_CLIP_MAX_BYTES)."""
    if size <= 0:
        raise ClipError(ApiCode.INVALID_AUDIO, f"The file {file_name!r} is empty. {ADVICE}")
    if size > max_bytes:
        raise ClipError(
            ApiCode.CLIP_TOO_LARGE, f"The file {file_name!r} is larger than the limit of {max_bytes} bytes. {ADVICE}"
        )


def check_header(header: ClipHeader, file_name: str) -> None:
    """Refuse (ClipError) a header that claims more than MAX_CHANNELS, a rate over MAX_RATE or over MAX_SECONDS."""
    if not 1 <= header.channels <= MAX_CHANNELS:
        raise ClipError(
            ApiCode.INVALID_AUDIO,
            f"The file {file_name!r} has {header.channels} channels; at most {MAX_CHANNELS}. {ADVICE}",
        )
    if not 0 < header.rate <= MAX_RATE:
        raise ClipError(
            ApiCode.INVALID_AUDIO,
            f"The file {file_name!r} has a sample rate of {header.rate} Hz; at most {MAX_RATE}. {ADVICE}",
        )
    if header.frames > MAX_SECONDS * header.rate:
        raise _too_long(file_name)


def _too_long(file_name: str) -> ClipError:
    return ClipError(
        ApiCode.AUDIO_TOO_LONG,
        f"The file {file_name!r} is longer than {MAX_SECONDS:g} s; at most {MAX_SECONDS:g} s is accepted. {ADVICE}",
    )


def clip_header(source: bytes | str | os.PathLike[str], file_name: str) -> ClipHeader:
    """Read and check a clip's header (bytes, or a file's path) without decoding it; ClipError when it is not audio
    or breaks a limit. Uploads, clips fetched from the bucket and the clips a worker reads all pass here first."""
    opened: str | os.PathLike[str] | IO[bytes] = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        info = sf.info(opened)
    except (RuntimeError, ValueError, TypeError, EOFError, OSError) as err:
        raise ClipError(
            ApiCode.INVALID_AUDIO, f"The file {file_name!r} could not be read as audio ({err}). {ADVICE}"
        ) from err
    header = ClipHeader(int(info.channels), int(info.samplerate), int(info.frames))
    check_header(header, file_name)
    return header


def check_clip(data: bytes, file_name: str, max_bytes: int) -> ClipHeader:
    """The checks every clip passes before it is decoded: its size, then its header (nothing is decoded)."""
    check_size(len(data), file_name, max_bytes)
    return clip_header(data, file_name)


def check_total(headers: Sequence[ClipHeader]) -> None:
    """Refuse (ClipError) clips whose headers add up, with the gaps between them, to more than MAX_SECONDS."""
    total = sum(header.seconds for header in headers) + GAP_SECONDS * max(0, len(headers) - 1)
    if total > MAX_SECONDS:
        raise ClipError(
            ApiCode.AUDIO_TOO_LONG,
            f"The files add up to {total:.1f} s, over {MAX_SECONDS:g} s in total; at most {MAX_SECONDS:g} s is "
            f"accepted. {ADVICE}",
        )


def decode_clips(files: Sequence[tuple[str, bytes]], max_bytes: int) -> tuple[list[Clip], np.ndarray]:
    """Check every file's size and header and their total length, and only then decode them into one reference."""
    check_total([check_clip(data, file_name, max_bytes) for file_name, data in files])
    clips = [decode_clip(data, file_name, max_bytes) for file_name, data in files]
    return clips, build_reference(clips)


def decode_clip_file(path: str | os.PathLike[str]) -> np.ndarray:
    """A clip on disk (a voice's reference, as a worker reads it) as mono at STORE_RATE: its header is checked
    first, then it is decoded block by block, so its memory is bounded whatever the file holds."""
    name = os.path.basename(path)
    clip_header(path, name)
    try:
        with _ForwardReader(path) as fh:
            return _read_mono(fh, name)
    except ClipError:
        raise
    except (RuntimeError, ValueError, TypeError, EOFError, MemoryError, OSError) as err:
        raise ClipError(
            ApiCode.INVALID_AUDIO, f"The file {name!r} could not be decoded as audio ({err}). {ADVICE}"
        ) from err


def decode_clip(data: bytes, file_name: str, max_bytes: int) -> Clip:
    """Decode one uploaded file to mono at STORE_RATE; raise ClipError for empty, oversized or undecodable files."""
    check_size(len(data), file_name, max_bytes)
    try:
        with _ForwardReader(io.BytesIO(data)) as fh:
            fmt = str(fh.format)
            rate = int(fh.samplerate)
            mono = _read_mono(fh, file_name)
    except ClipError:
        raise
    except (RuntimeError, ValueError, TypeError, EOFError, MemoryError) as err:
        raise ClipError(
            ApiCode.INVALID_AUDIO, f"The file {file_name!r} could not be decoded as audio ({err}). {ADVICE}"
        ) from err
    if rate <= 0 or mono.size == 0:
        raise ClipError(ApiCode.INVALID_AUDIO, f"The file {file_name!r} holds no audio. {ADVICE}")
    mono = np.nan_to_num(mono, nan=0.0, posinf=0.0, neginf=0.0)
    return Clip(
        file_name=file_name,
        mime_type=_MIME_BY_FORMAT.get(fmt, "application/octet-stream"),
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        pcm=np.clip(mono, -1.0, 1.0),
    )


def _read_mono(fh: _ForwardReader, file_name: str) -> np.ndarray:
    """Check the header's channels, rate and length, then decode block by block to mono at STORE_RATE.

    The header is not trusted for the length either: decoding stops as soon as more than MAX_SECONDS came out.
    """
    rate = int(fh.samplerate)
    check_header(ClipHeader(int(fh.channels), rate, int(fh.frames)), file_name)
    too_long = _too_long(file_name)
    resampler = None if rate == STORE_RATE else soxr.ResampleStream(rate, STORE_RATE, 1, dtype="float32", quality="HQ")
    block = max(1, int(rate * _BLOCK_S))
    parts: list[np.ndarray] = []
    decoded = 0
    while True:
        samples = fh.read(block, dtype="float32", always_2d=True)
        last = len(samples) < block
        decoded += len(samples)
        if decoded > MAX_SECONDS * rate:
            raise too_long
        mono = samples.mean(axis=1, dtype=np.float32) if len(samples) else np.zeros(0, dtype=np.float32)
        if resampler is not None:
            mono = resampler.resample_chunk(mono, last=last)
        parts.append(np.asarray(mono, dtype=np.float32))
        if last:
            break
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def active_seconds(pcm: np.ndarray, rate: int) -> float:
    """Seconds of 20 ms frames that carry sound above -40 dBFS."""
    frame = max(1, int(rate * _FRAME_S))
    usable = len(pcm) // frame * frame
    if usable == 0:
        return 0.0
    rms = np.sqrt((pcm[:usable].reshape(-1, frame) ** 2).mean(axis=1))
    return float((rms > _ACTIVE_RMS).sum()) * frame / rate


def build_reference(clips: list[Clip]) -> np.ndarray:
    """Join the uploads into one reference and check it is long enough, short enough and not silent."""
    gap = np.zeros(int(GAP_SECONDS * STORE_RATE), dtype=np.float32)
    parts: list[np.ndarray] = []
    for clip in clips:
        if parts:
            parts.append(gap)
        parts.append(clip.pcm)
    pcm = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
    seconds = len(pcm) / STORE_RATE
    if seconds < MIN_SECONDS:
        raise ClipError(
            ApiCode.AUDIO_TOO_SHORT, f"The reference is {seconds:.1f} s long; at least 5 s is needed. {ADVICE}"
        )
    if seconds > MAX_SECONDS:
        raise ClipError(
            ApiCode.AUDIO_TOO_LONG, f"The reference is {seconds:.1f} s long; at most 60 s is accepted. {ADVICE}"
        )
    sound = active_seconds(pcm, STORE_RATE)
    if sound < MIN_ACTIVE_SECONDS:
        raise ClipError(
            ApiCode.SILENT_AUDIO,
            f"The reference is silent or nearly so ({sound:.1f} s above -40 dBFS). {ADVICE}",
        )
    return pcm


def encode_wav(pcm: np.ndarray) -> bytes:
    """The stored form of a reference: 16-bit PCM WAV at STORE_RATE."""
    out = io.BytesIO()
    sf.write(out, pcm, STORE_RATE, format="WAV", subtype="PCM_16")
    return out.getvalue()
