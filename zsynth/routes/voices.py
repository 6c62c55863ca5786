"""Voices: listing (``/v1/voices``, ``/v2/voices``), settings, cloning (``POST /voices``, ``POST /v1/voices/add``)
and removal (``DELETE /voices/{id}``, ``DELETE /v1/voices/{id}``).

Full-key-only scope on cloning and removal is enforced by the auth middleware, by path.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from .. import protocol
from ..errors import ApiError
from ..jsonbody import BadJson, loads
from ..keys import REDIS, REQUEST_ID, SETTINGS, VOICE_MIRROR, VOICES
from ..voices import DEFAULT_SETTINGS, StoredVoice, VoiceCatalog, VoiceConfigError, VoiceStore
from ..voices.catalog import clone_object, new_clone_meta
from ..voices.clips import ADVICE, STORE_RATE, Clip, ClipError, build_reference, decode_clip, encode_wav
from ..voices.mirror import VoiceMirror

logger = logging.getLogger(__name__)

MAX_FILES: Final = 10
MAX_FIELD_BYTES: Final = 64 * 1024
MAX_NAME_CHARS: Final = 200
SORTS: Final = ("created_at_unix", "name")
# v2 voice_type values mapped to the categories they cover (clones are the caller's own, personal voices).
VOICE_TYPES: Final[dict[str, tuple[str, ...]]] = {
    "personal": ("cloned",),
    "workspace": ("cloned",),
    "non-default": ("cloned",),
    "default": ("premade",),
    "community": (),
    "non-community": ("premade", "cloned"),
    "saved": ("premade", "cloned"),
}


# ----- lifecycle -------------------------------------------------------------------------------------------------


async def voices_context(app: web.Application) -> AsyncIterator[None]:
    """Open the store, restore from the bucket when mirroring, and check the pinned swap-out voice."""
    settings = app[SETTINGS]
    store = VoiceStore(settings.voices_dir)
    await asyncio.to_thread(store.ensure)
    catalog = VoiceCatalog(store, settings.engine, settings.swapout_default_voice)
    mirror: VoiceMirror | None = None
    if settings.voices_bucket:

        async def count_failure() -> None:
            await app[REDIS].incr(protocol.VOICE_MIRROR_FAILURES)

        mirror = VoiceMirror(
            store,
            settings.voices_bucket,
            settings.voices_prefix,
            attempts=settings.voices_mirror_attempts,
            retry_s=settings.voices_mirror_retry_s,
            on_failure=count_failure,
        )
        await mirror.start()
        await mirror.restore()
        app[VOICE_MIRROR] = mirror
    try:
        catalog.check_swapout()
    except VoiceConfigError as err:
        logger.critical("%s", err)
        if mirror is not None:
            await mirror.close(grace_s=0)
        raise
    app[VOICES] = catalog
    yield
    if mirror is not None:
        await mirror.close()


# ----- listing and settings --------------------------------------------------------------------------------------


def _voice_or_404(catalog: VoiceCatalog, voice_id: str) -> dict[str, Any]:
    voice = catalog.get(voice_id)
    if voice is None:
        raise ApiError(404, "voice_not_found", f"A voice with the voice_id {voice_id} was not found.", param="voice_id")
    return voice


async def list_v1(request: web.Request) -> web.Response:
    """``GET /v1/voices``: every voice, built-in first."""
    return web.json_response({"voices": request.app[VOICES].all()})


def _page_token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode().rstrip("=")


def _token_offset(token: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        kind, _, number = raw.partition(":")
        offset = int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError) as err:
        raise ApiError(400, "invalid_parameters", "next_page_token is not valid.", param="next_page_token") from err
    if kind != "o" or offset < 0:
        raise ApiError(400, "invalid_parameters", "next_page_token is not valid.", param="next_page_token")
    return offset


def _page_size(raw: str | None) -> int:
    try:
        size = int(raw) if raw is not None else 10
    except ValueError:
        size = 0
    if not 1 <= size <= 100:
        raise ApiError(422, "invalid_parameters", "page_size must be a whole number from 1 to 100.", param="page_size")
    return size


def _matches(voice: dict[str, Any], needle: str) -> bool:
    haystack = [voice["name"], voice.get("description") or "", *voice["labels"].values()]
    return any(needle in str(text).lower() for text in haystack)


def _filter(voices: list[dict[str, Any]], query: Any) -> list[dict[str, Any]]:
    if search := query.get("search", "").strip().lower():
        voices = [v for v in voices if _matches(v, search)]
    if category := query.get("category"):
        voices = [v for v in voices if v["category"] == category]
    if voice_type := query.get("voice_type"):
        if voice_type not in VOICE_TYPES:
            raise ApiError(
                422, "invalid_parameters", f"voice_type must be one of {', '.join(VOICE_TYPES)}.", param="voice_type"
            )
        voices = [v for v in voices if v["category"] in VOICE_TYPES[voice_type]]
    if ids := query.getall("voice_ids", []):
        wanted = set(ids)
        voices = [v for v in voices if v["voice_id"] in wanted]
    return voices


def _sort(voices: list[dict[str, Any]], sort: str | None, direction: str | None) -> list[dict[str, Any]]:
    if direction is not None and direction not in ("asc", "desc"):
        raise ApiError(422, "invalid_parameters", "sort_direction must be asc or desc.", param="sort_direction")
    if sort is None:
        return voices[::-1] if direction == "desc" else voices
    if sort not in SORTS:
        raise ApiError(422, "invalid_parameters", "sort must be created_at_unix or name.", param="sort")
    reverse = direction != "asc"
    if sort == "name":
        return sorted(voices, key=lambda v: (str(v["name"]).lower(), v["voice_id"]), reverse=reverse)
    return sorted(voices, key=lambda v: (int(v["created_at_unix"] or 0), v["voice_id"]), reverse=reverse)


async def list_v2(request: web.Request) -> web.Response:
    """``GET /v2/voices``: filtered, sorted and paged with an opaque ``next_page_token``."""
    query = request.query
    page_size = _page_size(query.get("page_size"))
    offset = _token_offset(query["next_page_token"]) if query.get("next_page_token") else 0
    voices = _sort(_filter(request.app[VOICES].all(), query), query.get("sort"), query.get("sort_direction"))
    page = voices[offset : offset + page_size]
    has_more = offset + page_size < len(voices)
    return web.json_response(
        {
            "voices": page,
            "has_more": has_more,
            "total_count": len(voices),
            "next_page_token": _page_token(offset + page_size) if has_more else None,
        }
    )


async def get_voice(request: web.Request) -> web.Response:
    """``GET /v1/voices/{voice_id}``: one voice, or 404 ``voice_not_found`` (no swap-out here)."""
    return web.json_response(_voice_or_404(request.app[VOICES], request.match_info["voice_id"]))


async def default_settings(request: web.Request) -> web.Response:
    """``GET /v1/voices/settings/default``."""
    return web.json_response(dict(DEFAULT_SETTINGS))


async def voice_settings(request: web.Request) -> web.Response:
    """``GET /v1/voices/{voice_id}/settings``."""
    return web.json_response(_voice_or_404(request.app[VOICES], request.match_info["voice_id"])["settings"])


# ----- cloning -----------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Upload:
    """The fields of a cloning request."""

    fields: dict[str, str] = field(default_factory=dict)
    files: list[tuple[str, bytes]] = field(default_factory=list)


async def _read_part(part: BodyPartReader, limit: int, on_overflow: ApiError) -> bytes:
    data = bytearray()
    while chunk := await part.read_chunk(256 * 1024):
        data.extend(chunk)
        if len(data) > limit:
            raise on_overflow
    return bytes(data)


async def read_upload(request: web.Request) -> Upload:
    """Parse the multipart body: text fields plus the clip parts named ``files`` (repeatable) or ``file``."""
    if not request.content_type.startswith("multipart/"):
        raise ApiError(
            400,
            "invalid_content_type",
            "Send multipart/form-data with a 'name' field and the reference clip as 'files' (or 'file'). " + ADVICE,
        )
    clip_limit = request.app[SETTINGS].voice_clip_max_bytes
    too_large = ApiError(400, "clip_too_large", f"A file is larger than the limit of {clip_limit} bytes. {ADVICE}")
    # Fix (hostile input): aiohttp's client_max_size does not apply to request.multipart(), so endless small fields
    # were read without bound. The whole body now counts against ZSYNTH_MAX_BODY_BYTES, as JSON bodies do.
    body_limit = request.app[SETTINGS].max_body_bytes
    body_too_large = ApiError(
        413, "request_too_large", f"The request body is larger than the limit of {body_limit} bytes."
    )
    if request.content_length is not None and request.content_length > body_limit:
        raise body_too_large
    upload = Upload()
    total = 0
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                continue
            name = part.name or ""
            if name in ("file", "files"):
                if len(upload.files) >= MAX_FILES:
                    raise ApiError(400, "too_many_files", f"Send at most {MAX_FILES} files. {ADVICE}", param="files")
                data = await _read_part(part, clip_limit, too_large)
                upload.files.append((part.filename or f"clip-{len(upload.files) + 1}", data))
            else:
                overflow = ApiError(400, "invalid_parameters", f"Field {name!r} is too long.", param=name)
                data = await _read_part(part, MAX_FIELD_BYTES, overflow)
                upload.fields[name] = data.decode("utf-8", "replace")
            total += len(data)
            if total > body_limit:
                raise body_too_large
    except (ValueError, HttpProcessingError) as err:
        # Fix (fuzzing): a part header aiohttp rejects (a control character in a field name) raises InvalidHeader,
        # an HttpProcessingError, which used to end as a 500.
        message = getattr(err, "message", None) or str(err)
        raise ApiError(400, "invalid_multipart", f"The multipart body could not be read: {message}") from err
    return upload


def _labels(raw: str | None) -> dict[str, str]:
    # SDK 2.78 sends the text "null" when the caller gave no labels.
    if raw is None or raw.strip() in ("", "null"):
        return {}
    try:
        # Fix (hostile input): json.loads let deep nesting and 5000-digit numbers through as 500s.
        value = loads(raw)
    except BadJson as err:
        raise ApiError(422, "invalid_parameters", "labels must be a JSON object of strings.", param="labels") from err
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ApiError(422, "invalid_parameters", "labels must be a JSON object of strings.", param="labels")
    return {str(k): str(v) for k, v in value.items() if v is not None}


def _create(store: VoiceStore, upload: Upload, name: str, labels: dict[str, str], limit: int) -> StoredVoice:
    """Decode, validate and store a clone (runs in a thread: decoding a minute of MP3 takes a while)."""
    clips: list[Clip] = [decode_clip(data, file_name, limit) for file_name, data in upload.files]
    pcm = build_reference(clips)
    description = upload.fields.get("description") or None
    meta = new_clone_meta(name, description, labels, [clip.sample() for clip in clips], len(pcm) / STORE_RATE)
    return store.install(meta, encode_wav(pcm))


async def create_voice(request: web.Request) -> StoredVoice:
    """Validate a cloning request, store the voice atomically, and queue its mirroring."""
    upload = await read_upload(request)
    name = upload.fields.get("name", "").strip()
    if not name or len(name) > MAX_NAME_CHARS:
        raise ApiError(
            422, "invalid_parameters", f"Field 'name' is required (1-{MAX_NAME_CHARS} characters).", param="name"
        )
    if not upload.files:
        raise ApiError(
            422, "invalid_parameters", f"Send the reference clip as 'files' or 'file'. {ADVICE}", param="files"
        )
    labels = _labels(upload.fields.get("labels"))
    catalog = request.app[VOICES]
    limit = request.app[SETTINGS].voice_clip_max_bytes
    try:
        voice = await asyncio.to_thread(_create, catalog.store, upload, name, labels, limit)
    except ClipError as err:
        raise ApiError(400, err.code, err.message, param="files") from err
    logger.info("request %s: cloned voice %s (%r)", request[REQUEST_ID], voice.voice_id, name)
    mirror = request.app.get(VOICE_MIRROR)
    if mirror is not None:
        mirror.put(voice.voice_id)
    return voice


async def clone(request: web.Request) -> web.Response:
    """``POST /voices``: answer with the new voice object."""
    return web.json_response(clone_object(await create_voice(request)))


async def add(request: web.Request) -> web.Response:
    """``POST /v1/voices/add`` (ElevenLabs instant voice cloning)."""
    voice = await create_voice(request)
    return web.json_response({"voice_id": voice.voice_id, "requires_verification": False})


async def delete(request: web.Request) -> web.Response:
    """``DELETE /voices/{voice_id}`` and ``DELETE /v1/voices/{voice_id}``: remove a cloned voice."""
    voice_id = request.match_info["voice_id"]
    catalog = request.app[VOICES]
    if voice_id in catalog.builtins:
        raise ApiError(400, "voice_not_deletable", f"{voice_id} is a built-in voice and cannot be removed.")
    if voice_id == catalog.swapout_id:
        raise ApiError(
            400, "voice_not_deletable", f"{voice_id} is the pinned swap-out voice (ZSYNTH_SWAPOUT_DEFAULT_VOICE)."
        )
    _voice_or_404(catalog, voice_id)
    mirror = request.app.get(VOICE_MIRROR)
    if mirror is not None:
        await asyncio.to_thread(catalog.store.add_tombstone, voice_id)
    if not await asyncio.to_thread(catalog.store.remove, voice_id):
        await asyncio.to_thread(catalog.store.drop_tombstone, voice_id)
        raise ApiError(404, "voice_not_found", f"A voice with the voice_id {voice_id} was not found.")
    logger.info("request %s: removed voice %s", request[REQUEST_ID], voice_id)
    if mirror is not None:
        mirror.delete(voice_id)
    return web.json_response({"status": "ok"})


def setup(app: web.Application) -> None:
    """Register the voice routes and the store's lifecycle."""
    app.cleanup_ctx.append(voices_context)
    app.router.add_get("/v1/voices", list_v1)
    app.router.add_get("/v2/voices", list_v2)
    app.router.add_get("/v1/voices/settings/default", default_settings)
    app.router.add_get("/v1/voices/{voice_id}", get_voice)
    app.router.add_get("/v1/voices/{voice_id}/settings", voice_settings)
    app.router.add_post("/v1/voices/add", add)
    app.router.add_delete("/v1/voices/{voice_id}", delete)
    app.router.add_post("/voices", clone)
    app.router.add_delete("/voices/{voice_id}", delete)
