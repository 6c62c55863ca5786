"""The bucket that holds the voice library: the one source of truth about cloned voices when boxes share it.

Objects under ``<prefix>``::

    <voice_id>/<reference name>    the reference clip (``reference.wav``, or ``reference-<revision>.wav`` after an edit)
    <voice_id>/meta.json           the voice's metadata, written after its clip: a voice with a meta.json is complete
    <voice_id>/tombstone.json      the voice was removed; kept for good, and it wins over any meta.json (ids are
                                   random and never reused, so nothing newer can ever follow a removal)
    _settings/<voice_id>.json      saved settings of a built-in voice

Every call raises one of :func:`~zsynth.core.optional.aws_errors` when the bucket cannot be reached; the callers
decide what the API answers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from zsynth.core.aws import S3Prefix
from zsynth.core.optional import client_error, is_client_error
from zsynth.core.voices.clips import ADVICE, ClipError, check_clip
from zsynth.core.voices.store import META, check_meta, is_clone_id, reference_name, revision

if TYPE_CHECKING:
    from botocore.config import Config

TOMBSTONE: Final = "tombstone.json"
SETTINGS_DIR: Final = "_settings"
# A meta.json or a saved setting is a few kilobytes; anything larger is refused unread.
JSON_MAX_BYTES: Final = 1024 * 1024
# The default cap on a reference clip (ZSYNTH_VOICE_CLIP_MAX_BYTES, as for uploads).
CLIP_MAX_BYTES: Final = 20 * 1024 * 1024
_READ_CHUNK: Final = 256 * 1024


class VoiceRefused(ValueError):
    """The bucket holds a voice this box will not take (a meta.json or a clip over its size cap, a reference that is
    not an audio clip, a clip whose header breaks the upload limits): never written to a disk, never decoded."""


class ObjectTooLarge(VoiceRefused):
    """An object over its size cap: refused from its size, before its body is read."""


def is_missing(err: BaseException) -> bool:
    """True when an S3 error means the object is not there (as opposed to the bucket being unreachable)."""
    if not is_client_error(err):
        return False
    response: dict[str, Any] = getattr(err, "response", {})
    code = str(response.get("Error", {}).get("Code", ""))
    return code in ("NoSuchKey", "404", "NotFound")


@dataclass(slots=True)
class Listing:
    """What the bucket holds: complete voices, removed ids, and built-ins with saved settings."""

    voices: set[str] = field(default_factory=set)
    tombstones: set[str] = field(default_factory=set)
    settings: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class RemoteVoice:
    """A voice as the bucket holds it."""

    meta: dict[str, Any]
    reference: bytes


class VoiceBucket(S3Prefix):
    """S3 operations on ``s3://bucket/prefix`` (endpoint and credentials from the standard AWS variables).

    A reference clip is read only when its size is at most ``clip_max_bytes`` and then checked as an upload is
    (:func:`~zsynth.core.voices.clips.check_clip`: size, channels, rate, length, from the header) before it is returned.
    """

    def __init__(
        self, bucket: str, prefix: str, config: Config | None = None, *, clip_max_bytes: int = CLIP_MAX_BYTES
    ) -> None:
        super().__init__(bucket, prefix, config)
        self.clip_max_bytes = clip_max_bytes

    def key(self, voice_id: str, name: str) -> str:
        """The object key of one file of a voice."""
        return f"{self.prefix}{voice_id}/{name}"

    def _settings_key(self, voice_id: str) -> str:
        return f"{self.prefix}{SETTINGS_DIR}/{voice_id}.json"

    async def _get(self, key: str, limit: int = JSON_MAX_BYTES) -> bytes:
        """The object's bytes; ObjectTooLarge, without reading its body, when its size is over ``limit``."""
        obj = await self._s3.get_object(Bucket=self.bucket, Key=key)
        body = obj["Body"]
        try:
            size = int(obj.get("ContentLength") or 0)
            if size > limit:
                raise ObjectTooLarge(f"s3 object {key} is {size} bytes, over the limit of {limit}")
            # Read at most one byte past the limit: a size header that lies cannot make this read more.
            data = bytearray()
            while chunk := await body.read(min(_READ_CHUNK, limit + 1 - len(data))):
                data.extend(chunk)
                if len(data) > limit:
                    raise ObjectTooLarge(f"s3 object {key} is over the limit of {limit} bytes")
        finally:
            body.close()
        return bytes(data)

    async def _put(self, key: str, body: bytes, content_type: str) -> None:
        await self._s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type)

    # ----- voices ------------------------------------------------------------------------------------------------

    async def put_voice(self, meta: Mapping[str, Any], reference: bytes | None) -> None:
        """Upload a voice: its clip first (when given), then meta.json, which makes it visible."""
        voice_id = str(meta["voice_id"])
        if reference is not None:
            await self._put(self.key(voice_id, reference_name(meta)), reference, "audio/wav")
        body = json.dumps(dict(meta), indent=1, ensure_ascii=False).encode()
        await self._put(self.key(voice_id, META), body, "application/json")

    async def is_removed(self, voice_id: str) -> bool:
        """Whether the bucket holds a tombstone for the voice."""
        try:
            await self._s3.head_object(Bucket=self.bucket, Key=self.key(voice_id, TOMBSTONE))
        except client_error() as err:
            if is_missing(err):
                return False
            raise
        return True

    async def get_meta(self, voice_id: str) -> dict[str, Any] | None:
        """The voice's meta.json, or None when the voice is absent or removed."""
        if await self.is_removed(voice_id):
            return None
        try:
            meta = json.loads(await self._get(self.key(voice_id, META)))
        except client_error() as err:
            if is_missing(err):
                return None
            raise
        if not isinstance(meta, dict):
            raise VoiceRefused(f"s3 meta.json of {voice_id} is not an object")
        try:
            check_meta(meta, voice_id)  # never written to a disk, never fetched
        except ValueError as err:
            raise VoiceRefused(str(err)) from err
        return meta

    async def get_voice(self, voice_id: str) -> RemoteVoice | None:
        """The voice (meta.json and clip) from the bucket, or None when it is absent or removed."""
        meta = await self.get_meta(voice_id)
        if meta is None:
            return None
        name = reference_name(meta)
        try:
            reference = await self._get(self.key(voice_id, name), self.clip_max_bytes)
        except client_error() as err:
            if is_missing(err):
                return None  # an edit replaced the clip between the two reads; its announcement brings the new one
            raise
        try:
            # The checks an upload passes, from the header alone: what no box may decode (a bomb) stays unread.
            check_clip(reference, name, self.clip_max_bytes)
        except ClipError as err:
            reason = err.message.removesuffix(ADVICE).strip().rstrip(".")
            raise VoiceRefused(f"the reference clip of {voice_id} in the bucket is refused: {reason}") from err
        return RemoteVoice(meta, reference)

    async def remove_voice(self, voice_id: str) -> None:
        """Write the tombstone (this is the removal), then delete the voice's other objects."""
        body = json.dumps({"voice_id": voice_id}).encode()
        await self._put(self.key(voice_id, TOMBSTONE), body, "application/json")
        await self.purge(voice_id)

    async def purge(self, voice_id: str) -> None:
        """Delete a removed voice's objects other than its tombstone (meta.json first)."""
        await self._s3.delete_object(Bucket=self.bucket, Key=self.key(voice_id, META))
        paginator = self._s3.get_paginator("list_objects_v2")
        async for page in paginator.paginate(Bucket=self.bucket, Prefix=self.key(voice_id, "")):
            for obj in page.get("Contents", []):
                key = str(obj["Key"])
                if not key.endswith("/" + TOMBSTONE):
                    await self._s3.delete_object(Bucket=self.bucket, Key=key)

    async def delete_object(self, voice_id: str, name: str) -> None:
        """Delete one file of a voice (an edit's old clip)."""
        await self._s3.delete_object(Bucket=self.bucket, Key=self.key(voice_id, name))

    async def listing(self) -> Listing:
        """Every voice, tombstone and saved built-in setting under the prefix."""
        found = Listing()
        paginator = self._s3.get_paginator("list_objects_v2")
        async for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
            for obj in page.get("Contents", []):
                rest = str(obj["Key"])[len(self.prefix) :]
                head, _, name = rest.partition("/")
                if head == SETTINGS_DIR and name.endswith(".json"):
                    found.settings.add(name[: -len(".json")])
                elif is_clone_id(head) and name == META:
                    found.voices.add(head)
                elif is_clone_id(head) and name == TOMBSTONE:
                    found.tombstones.add(head)
        found.voices -= found.tombstones
        return found

    # ----- built-in voices' settings -----------------------------------------------------------------------------

    async def put_settings(self, voice_id: str, rev: int, settings: Mapping[str, Any]) -> None:
        """Save a built-in voice's settings."""
        body = json.dumps({"voice_id": voice_id, "revision": rev, "settings": dict(settings)}).encode()
        await self._put(self._settings_key(voice_id), body, "application/json")

    async def get_settings(self, voice_id: str) -> tuple[int, dict[str, Any]] | None:
        """A built-in voice's saved revision and settings, or None."""
        try:
            saved = json.loads(await self._get(self._settings_key(voice_id)))
        except client_error() as err:
            if is_missing(err):
                return None
            raise
        if not isinstance(saved, dict) or not isinstance(saved.get("settings"), dict):
            raise ValueError(f"s3 settings of {voice_id} are not an object")
        return revision(saved), dict(saved["settings"])
