"""Cloned voices for the turbo engine: find the reference clip, check it, and cache its conditioning.

A cloned voice is a directory (``ZSYNTH_DATA_DIR/voices/<voice_id>/``) holding its reference clip and metadata. The
reference is found by :func:`find_reference`, in this order:

1. ``meta["reference"]`` (a file name inside the directory, or a path inside it);
2. the ``reference`` field of ``meta.json`` or ``voice.json`` in the directory;
3. a file named ``reference.<ext>``, then any other audio file (wav, flac, ogg, mp3), first by name.

The conditioning computed from it is saved next to it as ``conditionals.pt`` with ``conditionals.json`` (the clip's
SHA-256 and the checkpoint's fingerprint, so a changed clip or other weights recompute it), written atomically so
that a restart or another worker on the box reuses it. Loaded conditioning stays on the device in a bounded LRU.
The clip is hashed once per file version, not per job: its digest is remembered against the file's size, mtime and
inode (a re-clone writes a new file, which changes them). The clip :func:`find_reference` found is remembered per
voice directory and meta.json revision (the worker asks once per text piece), until the voice is forgotten.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from zsynth.core.voices.store import revision

logger = logging.getLogger(__name__)

AUDIO_SUFFIXES: Final = (".wav", ".flac", ".ogg", ".mp3")
META_FILES: Final = ("meta.json", "voice.json")
CONDS_FILE: Final = "conditionals.pt"
CONDS_INFO: Final = "conditionals.json"
DIGESTS_KEPT: Final = 100_000  # clip digests remembered (about 200 bytes each)
MIN_CLIP_S: Final = 5.0  # prepare_conditionals asserts more than this (a bare assert, gone under python -O)


class VoiceClipError(ValueError):
    """A cloned voice's reference clip is missing or unusable; the message says what to send."""


def _inside(root: Path, name: str) -> Path | None:
    candidate = (root / name).resolve()
    return candidate if candidate.is_file() and candidate.is_relative_to(root.resolve()) else None


def find_reference(voice_dir: Path, meta: Mapping[str, Any]) -> Path:
    """The reference clip of the voice in ``voice_dir`` (see the module docstring for the order)."""
    named: list[str] = []
    if isinstance(meta.get("reference"), str):
        named.append(meta["reference"])
    for meta_name in META_FILES:
        with_meta = voice_dir / meta_name
        if with_meta.is_file():
            try:
                stored = json.loads(with_meta.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(stored, dict) and isinstance(stored.get("reference"), str):
                named.append(stored["reference"])
    for name in named:
        found = _inside(voice_dir, name)
        if found is not None:
            return found
    audio = sorted(p for p in voice_dir.iterdir() if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
    audio.sort(key=lambda p: p.stem != "reference")
    if not audio:
        raise VoiceClipError(f"voice {voice_dir.name} has no reference clip; clone it again with 10-20 s of speech")
    return audio[0]


def check_clip(path: Path) -> float:
    """The clip's duration in seconds; raises :class:`VoiceClipError` unless it is longer than 5 s."""
    import librosa

    try:
        seconds = float(librosa.get_duration(path=str(path)))
    except Exception as err:  # librosa raises several unrelated types for unreadable audio
        raise VoiceClipError(f"the reference clip {path.name} cannot be decoded: {err}") from err
    if seconds <= MIN_CLIP_S:
        raise VoiceClipError(
            f"the reference clip is {seconds:.1f} s long; send more than {MIN_CLIP_S:.0f} s "
            "(about 10-20 s of clean single-speaker audio)"
        )
    return seconds


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checkpoint_fingerprint(ckpt: Path, names: tuple[str, ...]) -> str:
    """A cheap identity for a set of weight files: sizes, safetensors headers and the first and last MiB."""
    digest = hashlib.sha256()
    for name in names:
        path = ckpt / name
        size = path.stat().st_size
        digest.update(f"{name}:{size}".encode())
        with path.open("rb") as fh:
            digest.update(fh.read(1 << 20))
            fh.seek(max(0, size - (1 << 20)))
            digest.update(fh.read())
    return digest.hexdigest()[:16]


def _atomic_write(dest: Path, write: Callable[[str], None]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ConditioningCache:
    """Conditioning per cloned voice: device LRU in front of ``conditionals.pt`` in the voice's directory."""

    def __init__(
        self,
        build: Callable[[Path], Any],
        load: Callable[[Path], Any],
        model_id: str,
        capacity: int,
    ) -> None:
        self._build = build  # reference clip -> Conditionals on the device (under inference mode)
        self._load = load  # conditionals.pt -> Conditionals on the device
        self.model_id = model_id
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, str], Any] = OrderedDict()
        # Clip path -> (size, mtime, inode) and digest; a few hundred bytes a voice, capped all the same.
        self._digests: OrderedDict[str, tuple[tuple[int, int, int], str]] = OrderedDict()
        # (voice directory, meta revision) -> the clip found there, its resolved path and the resolved directory.
        self._references: OrderedDict[tuple[str, int], tuple[Path, str, str]] = OrderedDict()
        self._lock = threading.Lock()  # the engine thread reads, the worker's loop forgets
        self.built = 0
        self.loaded = 0
        self.hits = 0  # conditioning found on the device (the worker's metrics read the three counters)
        self.hashed = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, voice_dir: Path, meta: Mapping[str, Any]) -> Any:
        """The voice's conditioning, from memory, from disk, or computed once and saved."""
        reference, resolved, root = self._reference(voice_dir, meta)
        try:
            sha = self._digest(reference, resolved)
        except FileNotFoundError:  # the remembered clip is gone (replaced under another name): look again
            with self._lock:
                self._references.pop((str(voice_dir), revision(meta)), None)
            reference, resolved, root = self._reference(voice_dir, meta)
            sha = self._digest(reference, resolved)
        key = (root, sha)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return self._entries[key]
        conds = self._from_disk(voice_dir, sha)
        if conds is None:
            check_clip(reference)
            conds = self._build(reference)
            self._save(voice_dir, reference, sha, conds)
            self.built += 1
        with self._lock:
            self._entries[key] = conds
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return conds

    def _reference(self, voice_dir: Path, meta: Mapping[str, Any]) -> tuple[Path, str, str]:
        """The voice's reference clip (:func:`find_reference`), its resolved path and the resolved directory."""
        key = (str(voice_dir), revision(meta))
        with self._lock:
            known = self._references.get(key)
            if known is not None:
                self._references.move_to_end(key)
                return known
        reference = find_reference(voice_dir, meta)
        found = (reference, str(reference.resolve()), str(voice_dir.resolve()))
        with self._lock:
            self._references[key] = found
            while len(self._references) > DIGESTS_KEPT:
                self._references.popitem(last=False)
        return found

    def _digest(self, reference: Path, name: str) -> str:
        """The clip's SHA-256 (``name``: its resolved path), recomputed only when its size, mtime or inode changed."""
        stat = reference.stat()
        signature = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
        known = self._digests.get(name)
        if known is not None and known[0] == signature:
            self._digests.move_to_end(name)
            return known[1]
        sha = file_sha256(reference)
        self.hashed += 1
        self._digests[name] = (signature, sha)
        while len(self._digests) > DIGESTS_KEPT:
            self._digests.popitem(last=False)
        return sha

    def forget(self, voice_id: str) -> None:
        """Drop every cached conditioning of the voice (edited or removed); the files go with its directory."""
        with self._lock:
            for key in [k for k in self._entries if Path(k[0]).name == voice_id]:
                del self._entries[key]
            for found in [k for k in self._references if Path(k[0]).name == voice_id]:
                del self._references[found]

    def _from_disk(self, voice_dir: Path, sha: str) -> Any:
        info_path, conds_path = voice_dir / CONDS_INFO, voice_dir / CONDS_FILE
        if not (info_path.is_file() and conds_path.is_file()):
            return None
        try:
            info = json.loads(info_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if info.get("reference_sha256") != sha or info.get("model") != self.model_id:
            logger.info("voice %s: cached conditioning is stale, recomputing", voice_dir.name)
            return None
        try:
            conds = self._load(conds_path)
        except Exception as err:  # a torn or foreign file must not stop synthesis: recompute instead
            logger.warning("voice %s: unreadable %s (%s), recomputing", voice_dir.name, CONDS_FILE, err)
            return None
        self.loaded += 1
        return conds

    def _save(self, voice_dir: Path, reference: Path, sha: str, conds: Any) -> None:
        try:
            _atomic_write(voice_dir / CONDS_FILE, conds.save)
            info = {"reference": reference.name, "reference_sha256": sha, "model": self.model_id}

            def write_info(tmp: str) -> None:
                Path(tmp).write_text(json.dumps(info) + "\n", encoding="utf-8")

            _atomic_write(voice_dir / CONDS_INFO, write_info)
        except OSError as err:  # a read-only voice store still serves, it just recomputes after a restart
            logger.warning("voice %s: could not save conditioning: %s", voice_dir.name, err)
