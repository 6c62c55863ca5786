"""Cloned voices on local disk: one directory per voice, written atomically, read by every process on the box.

Layout under ``Settings.voices_dir``::

    <voice_id>/meta.json        what the API shows about the voice: name, labels, saved settings, its ``revision``
                                and the file name of its reference clip
    <voice_id>/reference*.wav   the reference clip, mono 16-bit PCM (an edit with a new clip writes a new name)
    <voice_id>/cache/           engine caches (conditioning computed once from the reference)
    .tmp-<pid>-<random>/        a voice being written by process <pid>; renamed into place only when complete
    .deleted/<voice_id>         tombstone of a removal (kept: a removed voice is never restored from anywhere); it
                                says whether the removal was asked of this box's API or learnt from the bucket
    .settings/<voice_id>.json   saved settings of a built-in voice
    .box-id                     this box's id in the voice library (one per data directory)
    .cursor                     the last voice-library announcement this box applied

A voice appears and disappears with a single ``rename``, so a reader never sees half a voice; an edit writes the new
clip under a new name first and then replaces meta.json (one ``rename``), so a reader sees the old voice or the new
one. This module does not import aiohttp: the workers read the same store.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

logger = logging.getLogger(__name__)

META: Final = "meta.json"
REFERENCE: Final = "reference.wav"
# The only names a meta.json may give its reference: the formats clips.py decodes (never meta.json, never a file that
# is not audio).
REFERENCE_SUFFIXES: Final = (".wav", ".flac", ".ogg", ".mp3")
CACHE: Final = "cache"
CLONE_PREFIX: Final = "custom-"
_ID_RE: Final = re.compile(r"^custom-[A-Za-z0-9_-]{4,64}$")
# Directory mtimes tick coarsely (a few ms): a listing is cached only once the directory has been still this long.
LEFTOVER_AGE_S: Final = 3600.0  # a temporary directory this old belongs to a writer that crashed
_SETTLED_NS: Final = 2_000_000_000
_SETTINGS_ID_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
# What a removal marker in .deleted/ holds: where the removal came from.
_REMOVED_HERE: Final = b"removed through this box's API\n"
_REMOVED_ELSEWHERE: Final = b"removed elsewhere, confirmed by the bucket\n"


def is_clone_id(voice_id: str) -> bool:
    """True when ``voice_id`` has the shape of a cloned voice's id (and so is safe as a directory name)."""
    return _ID_RE.fullmatch(voice_id) is not None  # match() with $ would take a trailing newline


def new_voice_id() -> str:
    """A fresh cloned-voice id: ``custom-`` and 16 random letters and digits."""
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return CLONE_PREFIX + "".join(secrets.choice(alphabet) for _ in range(16))


@dataclass(frozen=True, slots=True)
class StoredVoice:
    """A cloned voice as it lies on disk."""

    voice_id: str
    path: Path
    meta: Mapping[str, Any]

    @property
    def reference(self) -> Path:
        """The reference clip (always inside the voice's directory: see :func:`reference_path`)."""
        return reference_path(self.path, self.meta)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _alive(pid: str) -> bool:
    """Whether the process with this pid (text from a leftover's name) still runs; False for no pid at all."""
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by another user
    return True


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _replace_file(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all: a temporary file next to it, fsynced, renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}")
    try:
        _write_file(tmp, data)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def revision(meta: Mapping[str, Any]) -> int:
    """A voice's revision: 0 at cloning, one more with every edit (meta.json written before revisions count 0)."""
    try:
        return int(meta.get("revision", 0))
    except (TypeError, ValueError):
        return 0


def is_bare_name(name: str) -> bool:
    """Whether ``name`` names a file directly inside a directory: no separator, not hidden, not ``..``."""
    return (
        0 < len(name) <= 255
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and not name.startswith(".")
        and name == os.path.basename(name)
    )


def reference_name(meta: Mapping[str, Any]) -> str:
    """The file name of a voice's reference clip (a bare name inside the voice's directory)."""
    name = str(meta.get("reference") or REFERENCE)
    return name if is_bare_name(name) else REFERENCE


def check_meta(meta: Mapping[str, Any], voice_id: str) -> None:
    """Refuse (ValueError) a meta.json, from the bucket or a disk, that is not ``voice_id``'s or whose reference
    names a file outside the voice's directory (``../``, an absolute path): bucket bytes are never written there."""
    if meta.get("voice_id") != voice_id:
        raise ValueError(f"meta.json does not describe {voice_id}")
    check_reference(meta, voice_id)


def check_reference(meta: Mapping[str, Any], voice_id: str) -> None:
    """Refuse (ValueError) a ``reference`` that is not a bare file name inside the voice's directory, or that names
    a file other than an audio clip (meta.json itself, a tombstone, anything without an audio suffix)."""
    name = meta.get("reference")
    if name is None:
        return
    if not (isinstance(name, str) and is_bare_name(name)):
        raise ValueError(f"meta.json of {voice_id} names a reference outside its directory: {str(name)[:80]!r}")
    if not name.lower().endswith(REFERENCE_SUFFIXES):
        raise ValueError(
            f"meta.json of {voice_id} names a reference that is not an audio clip ({', '.join(REFERENCE_SUFFIXES)}): "
            f"{name[:80]!r}"
        )


def reference_path(voice_dir: Path, meta: Mapping[str, Any]) -> Path:
    """The reference clip of the voice in ``voice_dir``; ValueError unless it lies inside that directory.

    Engines read the clip through this, so a meta.json that names another path is refused, never followed (a
    symbolic link out of the directory included).
    """
    check_reference(meta, voice_dir.name)
    path = voice_dir / reference_name(meta)
    root = voice_dir.resolve()
    if path.resolve().parent != root:
        raise ValueError(f"the reference of {voice_dir.name} lies outside its directory")
    return path


class VoiceStore:
    """The cloned voices of this box, on ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache_stamp: int | None = None
        self._cache: dict[str, StoredVoice] = {}

    def ensure(self) -> None:
        """Create the directory tree and sweep the temporary leftovers of crashed writers.

        A leftover goes when the process that made it (its name carries the pid) is gone, or when it is older than
        :data:`LEFTOVER_AGE_S` (a reused pid): another live process sharing the directory, a second front on the
        box, may be writing a voice into its own temporary directory right now.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / ".deleted").mkdir(exist_ok=True)
        cutoff = time.time() - LEFTOVER_AGE_S
        for leftover in self.root.glob(".t*-*"):
            kind, _, rest = leftover.name.partition("-")
            if kind not in (".tmp", ".trash"):
                continue
            with contextlib.suppress(FileNotFoundError):
                if not _alive(rest.partition("-")[0]) or leftover.stat().st_mtime < cutoff:
                    shutil.rmtree(leftover, ignore_errors=True)

    # ----- reading ---------------------------------------------------------------------------------------------

    def _scan(self) -> dict[str, StoredVoice]:
        voices: dict[str, StoredVoice] = {}
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.root):
                if not is_clone_id(entry.name):
                    continue
                voice = self._load(Path(entry.path))
                if voice is not None:
                    voices[voice.voice_id] = voice
        return voices

    def _load(self, path: Path) -> StoredVoice | None:
        try:
            meta = json.loads((path / META).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            logger.error("voice store: unreadable %s: %s", path / META, err)
            return None
        try:
            if not isinstance(meta, dict):
                raise ValueError("meta.json is not an object")
            check_meta(meta, path.name)
        except ValueError as err:
            logger.error("voice store: refusing %s: %s", path / META, err)
            return None
        return StoredVoice(path.name, path, meta)

    def all(self) -> dict[str, StoredVoice]:
        """Every stored voice by id; rescanned only when the directory changed (adds and removals are renames)."""
        return dict(self._current())

    def has(self, voice_id: str) -> bool:
        """Whether the voice is stored, from the same cached listing (no copy, no file read per request)."""
        return voice_id in self._current()

    def invalidate(self) -> None:
        """Forget the cached listing: an edit replaces a meta.json without touching the root's mtime."""
        self._cache_stamp = None

    def _current(self) -> dict[str, StoredVoice]:
        try:
            stamp = os.stat(self.root).st_mtime_ns
        except FileNotFoundError:
            return {}
        if stamp != self._cache_stamp or time.time_ns() - stamp < _SETTLED_NS:
            self._cache = self._scan()
            self._cache_stamp = stamp
        return self._cache

    def get(self, voice_id: str) -> StoredVoice | None:
        """One stored voice, read straight from disk (a worker must see a voice the moment it is renamed in)."""
        if not is_clone_id(voice_id):
            return None
        return self._load(self.root / voice_id)

    # ----- writing ---------------------------------------------------------------------------------------------

    def install(self, meta: Mapping[str, Any], reference: bytes) -> StoredVoice:
        """Write a complete voice atomically: a temporary directory, fsynced, then renamed into place.

        Raises FileExistsError when the voice is already there (another front restored it first).
        """
        voice_id = str(meta["voice_id"])
        if not is_clone_id(voice_id):
            raise ValueError(f"not a cloned voice id: {voice_id!r}")
        check_meta(meta, voice_id)
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / voice_id
        if final.exists():
            raise FileExistsError(final)
        tmp = self.root / f".tmp-{os.getpid()}-{secrets.token_hex(8)}"
        tmp.mkdir()
        try:
            _write_file(tmp / reference_name(meta), reference)
            _write_file(tmp / META, json.dumps(dict(meta), indent=1, ensure_ascii=False).encode())
            _fsync_dir(tmp)
            try:
                os.rename(tmp, final)
            except OSError as err:
                if final.exists():
                    raise FileExistsError(final) from err
                raise
            _fsync_dir(self.root)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        logger.info("voice store: wrote %s", voice_id)
        return StoredVoice(voice_id, final, dict(meta))

    def update(self, meta: Mapping[str, Any], reference: bytes | None) -> StoredVoice:
        """Replace a stored voice's metadata (and, with ``reference``, its clip) in place.

        The new clip is written under the name ``meta["reference"]`` before meta.json is replaced, so a reader sees
        either the old voice or the new one; the old clip is removed afterwards. Raises FileNotFoundError when the
        voice is not stored.
        """
        voice_id = str(meta["voice_id"])
        if not is_clone_id(voice_id):
            raise ValueError(f"not a cloned voice id: {voice_id!r}")
        check_meta(meta, voice_id)
        voice_dir = self.root / voice_id
        if not (voice_dir / META).is_file():
            raise FileNotFoundError(voice_dir)
        name = reference_name(meta)
        if reference is not None:
            _replace_file(voice_dir / name, reference)
        elif not (voice_dir / name).is_file():
            raise FileNotFoundError(voice_dir / name)
        _replace_file(voice_dir / META, json.dumps(dict(meta), indent=1, ensure_ascii=False).encode())
        for old in voice_dir.glob("reference*.wav"):
            if old.name != name:
                with contextlib.suppress(FileNotFoundError):
                    old.unlink()
        self.invalidate()
        logger.info("voice store: updated %s to revision %d", voice_id, revision(meta))
        return StoredVoice(voice_id, voice_dir, dict(meta))

    def remove(self, voice_id: str) -> bool:
        """Remove a voice with one rename (then delete the renamed tree); False when it was not there."""
        if not is_clone_id(voice_id):
            return False
        trash = self.root / f".trash-{os.getpid()}-{secrets.token_hex(8)}"
        try:
            os.rename(self.root / voice_id, trash)
        except FileNotFoundError:
            return False
        _fsync_dir(self.root)
        shutil.rmtree(trash, ignore_errors=True)
        logger.info("voice store: removed %s", voice_id)
        return True

    def read_files(self, voice_id: str) -> tuple[bytes, bytes] | None:
        """The meta.json and reference bytes of a voice (what a start-up uploads when the bucket lacks it)."""
        voice = self.get(voice_id)
        if voice is None:
            return None
        try:
            return (voice.path / META).read_bytes(), voice.reference.read_bytes()
        except FileNotFoundError:
            return None

    # ----- saved settings of built-in voices (a clone keeps its own in meta.json) ------------------------------

    def builtin_settings(self, voice_id: str) -> tuple[int, dict[str, Any]]:
        """The revision and saved settings of a built-in voice; (0, {}) when none were saved."""
        if not _SETTINGS_ID_RE.fullmatch(voice_id):
            return 0, {}
        try:
            saved = json.loads((self.root / ".settings" / f"{voice_id}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return 0, {}
        if not isinstance(saved, dict) or not isinstance(saved.get("settings"), dict):
            return 0, {}
        return revision(saved), dict(saved["settings"])

    def save_builtin_settings(self, voice_id: str, rev: int, settings: Mapping[str, Any]) -> None:
        """Save a built-in voice's settings (atomically: other processes of the box read them per job)."""
        if not _SETTINGS_ID_RE.fullmatch(voice_id):
            raise ValueError(f"not a voice id: {voice_id!r}")
        (self.root / ".settings").mkdir(parents=True, exist_ok=True)
        body = json.dumps({"voice_id": voice_id, "revision": rev, "settings": dict(settings)}).encode()
        _replace_file(self.root / ".settings" / f"{voice_id}.json", body)

    def saved_settings(self, voice_id: str) -> dict[str, Any]:
        """The saved settings a job for ``voice_id`` starts from: a clone's from its meta.json, else a built-in's."""
        if is_clone_id(voice_id):
            voice = self.get(voice_id)
            return dict(voice.meta.get("settings") or {}) if voice is not None else {}
        return self.builtin_settings(voice_id)[1]

    # ----- this box in the voice library -------------------------------------------------------------------------

    def box_id(self) -> str:
        """This data directory's id in the voice library, made once and kept."""
        path = self.root / ".box-id"
        with contextlib.suppress(FileNotFoundError):
            stored = path.read_text(encoding="utf-8").strip()
            if stored:
                return stored
        self.root.mkdir(parents=True, exist_ok=True)
        fresh = secrets.token_hex(8)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return path.read_text(encoding="utf-8").strip() or fresh  # another process of the box made it first
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(fresh + "\n")
        return fresh

    def cursor(self) -> str | None:
        """The id of the last voice-library announcement applied on this box, or None."""
        with contextlib.suppress(OSError):
            value = (self.root / ".cursor").read_text(encoding="utf-8").strip()
            return value or None
        return None

    def save_cursor(self, entry_id: str) -> None:
        """Remember the last announcement applied (best effort: a lost cursor only means a longer catch-up)."""
        try:
            _replace_file(self.root / ".cursor", entry_id.encode())
        except OSError as err:
            logger.warning("voice store: could not save the library cursor: %s", err)

    # ----- tombstones ------------------------------------------------------------------------------------------

    def add_tombstone(self, voice_id: str, *, here: bool) -> None:
        """Remember a removal: a start-up never uploads a voice removed here (the bucket keeps its own tombstone).

        ``here`` is true for a removal asked of this box's API, false for one this box learnt from the bucket: only
        the first kind may ever become a tombstone in the bucket (see :meth:`tombstones_made_here`).
        """
        (self.root / ".deleted").mkdir(parents=True, exist_ok=True)
        _write_file(self.root / ".deleted" / voice_id, _REMOVED_HERE if here else _REMOVED_ELSEWHERE)

    def drop_tombstone(self, voice_id: str) -> None:
        """The bucket no longer has the voice."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root / ".deleted" / voice_id)

    def tombstones(self) -> set[str]:
        """Ids removed on this box."""
        with contextlib.suppress(FileNotFoundError):
            return {name for name in os.listdir(self.root / ".deleted") if is_clone_id(name)}
        return set()

    def tombstones_made_here(self) -> set[str]:
        """Ids removed through this box's API (not merely heard of; the empty markers of earlier versions count as
        heard of: they cannot say where the removal came from)."""
        made: set[str] = set()
        for voice_id in self.tombstones():
            with contextlib.suppress(OSError):
                if (self.root / ".deleted" / voice_id).read_bytes() == _REMOVED_HERE:
                    made.add(voice_id)
        return made
