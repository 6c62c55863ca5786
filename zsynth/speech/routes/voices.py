"""Voices: listing (``/v1/voices``, ``/v2/voices``), settings, cloning (``POST /voices``, ``POST /v1/voices/add``),
edits (``POST /v1/voices/{id}/edit``, ``POST /v1/voices/{id}/settings/edit``) and removal (``DELETE /voices/{id}``,
``DELETE /v1/voices/{id}``).

Every use case is the voice service's (:mod:`zsynth.services.voice_service`): these routes parse the request, call it
and answer. A change goes through the box's voice library: with a bucket it is durable there before the answer, and a
bucket that cannot be reached answers 503 ``voice_storage_unavailable`` with ``Retry-After`` and changes nothing.
The changes are declared for full keys only (tokens may read).

The response models and the multipart schemas are in :mod:`zsynth.speech.schemas.voices`; the library's lifecycle
is :func:`zsynth.services.voice_library.voices_context`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import pydantic
from aiohttp import web
from pydantic import BaseModel, Field

from zsynth.core.codes import ApiCode
from zsynth.kit.endpoints import Access, Endpoints, json_body_bytes, refusal, validate
from zsynth.kit.errors import ApiError
from zsynth.kit.jsonbody import BadJson, loads
from zsynth.kit.multipart import BoundedMultipart
from zsynth.services.auth import AUTHENTICATOR, CREDENTIAL, workspace_of
from zsynth.services.keys import REQUEST_ID, SETTINGS
from zsynth.services.voice_service import (
    ADVICE,
    ClipError,
    StorageUnavailable,
    StoredVoice,
    VoiceMissing,
    VoiceRefused,
    VoiceService,
    voice_service,
)
from zsynth.services.voices import DEFAULT_SETTINGS, clone_object
from zsynth.speech.schemas.apidoc import json_body
from zsynth.speech.schemas.bodies import api_error, checked_voice_settings, one_of, refusing
from zsynth.speech.schemas.voices import (
    CLONE_BODY,
    EDIT_BODY,
    MAX_FILES,
    MAX_NAME_CHARS,
    AddVoiceResponse,
    DeleteResponse,
    EditResponse,
    Voice,
    VoiceList,
    VoicePage,
    VoiceSettings,
)

logger = logging.getLogger(__name__)

routes = Endpoints()

MAX_FIELD_BYTES: Final = 64 * 1024
RETRY_AFTER_S: Final = 5
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


_VOICE_ID: Final = {"voice_id": "A voice id (built-in, or custom-... for clones)."}
_STORAGE_503: Final = (
    " With ZSYNTH_VOICES_BUCKET set the change is in the bucket before the answer; a bucket that cannot be reached "
    "answers 503 voice_storage_unavailable with Retry-After and changes nothing."
)
_SETTINGS: Final = json_body("The settings.", VoiceSettings)


def _delete_doc(operation_id: str) -> dict[str, Any]:
    return {
        "access": Access.FULL,
        "operationId": operation_id,
        "tags": ["voices"],
        "summary": "Remove a cloned voice." + _STORAGE_503,
        "path_params": _VOICE_ID,
        "responses": {200: json_body("Removed on every box (the bucket keeps a tombstone).", DeleteResponse)},
        "errors": (400, 404),
    }


def storage_unavailable(err: StorageUnavailable) -> ApiError:
    """The answer when the bucket that holds the voice library cannot be reached: nothing was changed.

    The storage's own words (its endpoint, bucket and object keys) are in the voice library's log line, never in
    the caller's message."""
    return ApiError(
        503,
        ApiCode.VOICE_STORAGE_UNAVAILABLE,
        "The voice library's storage cannot be reached; nothing was changed. Try again shortly.",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def voice_not_found(err: VoiceMissing) -> ApiError:
    """404 ``voice_not_found``: unknown, and another workspace's, alike."""
    return ApiError(404, ApiCode.VOICE_NOT_FOUND, err.message, param="voice_id")


def refused(err: VoiceRefused) -> ApiError:
    """400 with the rule's code (``voice_not_editable``, ``voice_not_deletable``)."""
    return ApiError(400, err.code, err.message)


@contextlib.contextmanager
def _answering() -> Iterator[None]:
    """The voice service's refusals as this API's answers, the same in every route here: 400 with the rule's code or
    the clip's, 503 when the bucket does not answer, 404 for a voice the caller has not got."""
    try:
        yield
    except VoiceRefused as err:
        raise refused(err) from err
    except ClipError as err:
        raise clip_refused(err) from err
    except StorageUnavailable as err:
        raise storage_unavailable(err) from err
    except VoiceMissing as err:
        raise voice_not_found(err) from err


def _service(request: web.Request) -> VoiceService:
    return voice_service(request.app)


def _workspace(request: web.Request) -> str:
    return workspace_of(request.get(CREDENTIAL))


# ----- listing and settings --------------------------------------------------------------------------------------


async def voice_or_404(request: web.Request, voice_id: str) -> dict[str, Any]:
    """The voice object of ``voice_id`` (:meth:`~zsynth.services.voice_service.VoiceService.lookup`): 404
    ``voice_not_found`` when there is no such voice for the caller, 503 when the bucket does not answer; never the
    swap-out voice."""
    with _answering():
        return await _service(request).lookup(voice_id, _workspace(request))


def _arriving(request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
    """While the start-up is still catching up with the bucket, the listing says so: ``voices_arriving`` is true and
    ``arriving_voice_ids`` names the cloned voices the bucket lists that this box has not fetched yet (an id among
    them is fetched on demand when asked for). Both fields are absent once the box is caught up.

    The bucket's listing names ids, not their workspaces, so the ids are shown only on a server without keys (one
    workspace): with keys the list is empty, or it would name other workspaces' clones."""
    arriving = _service(request).arriving(one_workspace=request.app[AUTHENTICATOR].is_open)
    if arriving is not None:
        body["voices_arriving"] = True
        body["arriving_voice_ids"] = arriving.voice_ids
    return body


@routes.get(
    "/v1/voices",
    access=Access.TOKEN,
    operationId="list_voices",
    tags=["voices"],
    summary="Every voice, built-in first.",
    responses={200: json_body("The voices.", VoiceList)},
)
async def list_v1(request: web.Request) -> web.Response:
    """``GET /v1/voices``: every voice, built-in first."""
    voices = _service(request).listing(_workspace(request))
    return web.json_response(_arriving(request, {"voices": voices}))


def _page_token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode().rstrip("=")


def _token_offset(token: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        kind, _, number = raw.partition(":")
        offset = int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError) as err:
        raise ApiError(
            400, ApiCode.INVALID_PARAMETERS, "next_page_token is not valid.", param="next_page_token"
        ) from err
    if kind != "o" or offset < 0:
        raise ApiError(400, ApiCode.INVALID_PARAMETERS, "next_page_token is not valid.", param="next_page_token")
    return offset


def _page_size(raw: str | None) -> int:
    try:
        size = int(raw) if raw is not None else 10
    except ValueError:
        size = 0
    if not 1 <= size <= 100:
        raise ApiError(
            422, ApiCode.INVALID_PARAMETERS, "page_size must be a whole number from 1 to 100.", param="page_size"
        )
    return size


def _matches(voice: dict[str, Any], needle: str) -> bool:
    haystack = [voice["name"], voice.get("description") or "", *voice["labels"].values()]
    return any(needle in str(text).lower() for text in haystack)


def _token(value: object) -> object:
    if value:
        _token_offset(str(value))
    return value


def _voice_type(value: object) -> object:
    if value and value not in VOICE_TYPES:
        raise refusal(ApiCode.INVALID_PARAMETERS, f"voice_type must be one of {', '.join(VOICE_TYPES)}.")
    return value


def _sort_direction(value: object) -> object:
    if value is not None and value not in ("asc", "desc"):
        raise refusal(ApiCode.INVALID_PARAMETERS, "sort_direction must be asc or desc.")
    return value


def _sort_key(value: object) -> object:
    if value is not None and value not in SORTS:
        raise refusal(ApiCode.INVALID_PARAMETERS, "sort must be created_at_unix or name.")
    return value


class VoiceListQuery(BaseModel):
    """The query of ``GET /v2/voices`` (fields in the order they are checked)."""

    page_size: Annotated[int, pydantic.BeforeValidator(refusing(_page_size))] = Field(
        default=10, ge=1, le=100, description="Page size."
    )
    next_page_token: Annotated[str | None, pydantic.BeforeValidator(refusing(_token))] = Field(
        default=None, description="The token of the previous page."
    )
    search: str | None = Field(default=None, description="Case-insensitive match on name, description and labels.")
    category: str | None = Field(default=None, description="premade or cloned.")
    voice_type: Annotated[str | None, pydantic.BeforeValidator(_voice_type), one_of(*VOICE_TYPES)] = Field(
        default=None, description="The ElevenLabs voice type filter."
    )
    voice_ids: list[str] | None = Field(default=None, description="Only these voices (repeat the parameter).")
    sort_direction: Annotated[str | None, pydantic.BeforeValidator(_sort_direction), one_of("asc", "desc")] = Field(
        default=None, description="Sort direction."
    )
    sort: Annotated[str | None, pydantic.BeforeValidator(_sort_key), one_of(*SORTS)] = Field(
        default=None, description="Sort key (default: built-in first, then oldest clone)."
    )

    @property
    def offset(self) -> int:
        """Where the page starts."""
        return _token_offset(self.next_page_token) if self.next_page_token else 0


def _filter(voices: list[dict[str, Any]], query: VoiceListQuery) -> list[dict[str, Any]]:
    if search := (query.search or "").strip().lower():
        voices = [v for v in voices if _matches(v, search)]
    if category := query.category:
        voices = [v for v in voices if v["category"] == category]
    if voice_type := query.voice_type:
        voices = [v for v in voices if v["category"] in VOICE_TYPES[voice_type]]
    if ids := query.voice_ids:
        wanted = set(ids)
        voices = [v for v in voices if v["voice_id"] in wanted]
    return voices


def _sort(voices: list[dict[str, Any]], sort: str | None, direction: str | None) -> list[dict[str, Any]]:
    if sort is None:
        return voices[::-1] if direction == "desc" else voices
    reverse = direction != "asc"
    if sort == "name":
        return sorted(voices, key=lambda v: (str(v["name"]).lower(), v["voice_id"]), reverse=reverse)
    return sorted(voices, key=lambda v: (int(v["created_at_unix"] or 0), v["voice_id"]), reverse=reverse)


@routes.get(
    "/v2/voices",
    access=Access.TOKEN,
    query=VoiceListQuery,
    operationId="list_voices_v2",
    tags=["voices"],
    summary="Voices filtered, sorted and paged.",
    responses={200: json_body("One page.", VoicePage)},
    errors=(400, 422),
)
async def list_v2(request: web.Request, query: VoiceListQuery) -> web.Response:
    """``GET /v2/voices``: filtered, sorted and paged with an opaque ``next_page_token``."""
    page_size, offset = query.page_size, query.offset
    voices = _service(request).listing(_workspace(request))
    voices = _sort(_filter(voices, query), query.sort, query.sort_direction)
    page = voices[offset : offset + page_size]
    has_more = offset + page_size < len(voices)
    return web.json_response(
        _arriving(
            request,
            {
                "voices": page,
                "has_more": has_more,
                "total_count": len(voices),
                "next_page_token": _page_token(offset + page_size) if has_more else None,
            },
        )
    )


@routes.get(
    "/v1/voices/{voice_id}",
    access=Access.TOKEN,
    operationId="get_voice",
    tags=["voices"],
    summary="One voice (404 voice_not_found: no swap-out here).",
    path_params=_VOICE_ID,
    responses={200: json_body("The voice.", Voice)},
    errors=(404,),
)
async def get_voice(request: web.Request) -> web.Response:
    """``GET /v1/voices/{voice_id}``: one voice, or 404 ``voice_not_found`` (no swap-out here)."""
    return web.json_response(await voice_or_404(request, request.match_info["voice_id"]))


@routes.get(
    "/v1/voices/settings/default",
    access=Access.TOKEN,
    operationId="default_settings",
    tags=["voices"],
    summary="The default voice settings.",
    responses={200: _SETTINGS},
)
async def default_settings(request: web.Request) -> web.Response:
    """``GET /v1/voices/settings/default``."""
    return web.json_response(dict(DEFAULT_SETTINGS))


@routes.get(
    "/v1/voices/{voice_id}/settings",
    access=Access.TOKEN,
    operationId="voice_settings",
    tags=["voices"],
    summary="A voice's saved settings (the defaults where none were saved).",
    path_params=_VOICE_ID,
    responses={200: _SETTINGS},
    errors=(404,),
)
async def voice_settings(request: web.Request) -> web.Response:
    """``GET /v1/voices/{voice_id}/settings``: the voice's saved settings (the defaults where none were saved)."""
    return web.json_response((await voice_or_404(request, request.match_info["voice_id"]))["settings"])


# ----- cloning -----------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Upload:
    """The fields of a cloning request."""

    fields: dict[str, str] = field(default_factory=dict)
    files: list[tuple[str, bytes]] = field(default_factory=list)


async def read_upload(request: web.Request) -> Upload:
    """Parse the multipart body: text fields plus the clip parts named ``files`` (repeatable) or ``file``."""
    if not request.content_type.startswith("multipart/"):
        raise ApiError(
            400,
            ApiCode.INVALID_CONTENT_TYPE,
            "Send multipart/form-data with a 'name' field and the reference clip as 'files' (or 'file'). " + ADVICE,
        )
    settings = request.app[SETTINGS]
    clip_limit = settings.voices.clip_max_bytes
    too_large = ApiError(
        400, ApiCode.CLIP_TOO_LARGE, f"A file is larger than the limit of {clip_limit} bytes. {ADVICE}"
    )
    # The whole body, boundaries and part headers included, counts against ZSYNTH_MAX_BODY_BYTES, as JSON bodies do.
    body = BoundedMultipart(
        request, max_bytes=settings.limits.max_body_bytes, max_parts=settings.limits.max_multipart_parts
    )
    upload = Upload()
    while (part := await body.next()) is not None:
        name = part.name or ""
        if name in ("file", "files"):
            if len(upload.files) >= MAX_FILES:
                raise ApiError(400, ApiCode.TOO_MANY_FILES, f"Send at most {MAX_FILES} files. {ADVICE}", param="files")
            data = await body.read(part, clip_limit, too_large)
            upload.files.append((part.filename or f"clip-{len(upload.files) + 1}", data))
        else:
            overflow = ApiError(400, ApiCode.INVALID_PARAMETERS, f"Field {name!r} is too long.", param=name)
            upload.fields[name] = (await body.read(part, MAX_FIELD_BYTES, overflow)).decode("utf-8", "replace")
    return upload


def _labels(raw: str | None) -> dict[str, str]:
    # SDK 2.78 sends the text "null" when the caller gave no labels.
    if raw is None or raw.strip() in ("", "null"):
        return {}
    try:
        # Strict JSON: deep nesting and 5000-digit numbers are a bad request, not a server error.
        value = loads(raw)
    except BadJson as err:
        raise ApiError(
            422, ApiCode.INVALID_PARAMETERS, "labels must be a JSON object of strings.", param="labels"
        ) from err
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ApiError(422, ApiCode.INVALID_PARAMETERS, "labels must be a JSON object of strings.", param="labels")
    return {str(k): str(v) for k, v in value.items() if v is not None}


def _name(raw: str | None, *, required: bool) -> str | None:
    name = (raw or "").strip()
    if not name and not required and raw is None:
        return None
    if not name or len(name) > MAX_NAME_CHARS:
        raise ApiError(
            422, ApiCode.INVALID_PARAMETERS, f"Field 'name' is required (1-{MAX_NAME_CHARS} characters).", param="name"
        )
    return name


def clip_refused(err: ClipError) -> ApiError:
    """400 with the clip check's code."""
    return ApiError(400, err.code, err.message, param="files")


async def create_voice(request: web.Request) -> StoredVoice:
    """Parse a cloning request and have the voice service add the voice (the bucket first, when there is one)."""
    upload = await read_upload(request)
    name = _name(upload.fields.get("name"), required=True)
    assert name is not None
    if not upload.files:
        raise ApiError(
            422, ApiCode.INVALID_PARAMETERS, f"Send the reference clip as 'files' or 'file'. {ADVICE}", param="files"
        )
    labels = _labels(upload.fields.get("labels"))
    description = upload.fields.get("description") or None
    try:
        voice = await _service(request).clone(name, description, labels, upload.files, _workspace(request))
    except ClipError as err:
        raise clip_refused(err) from err
    except StorageUnavailable as err:
        logger.error("request %s: cloning refused, the voice library is unreachable: %s", request[REQUEST_ID], err)
        raise storage_unavailable(err) from err
    logger.info("request %s: cloned voice %s (%r)", request[REQUEST_ID], voice.voice_id, name)
    return voice


@routes.post(
    "/voices",
    access=Access.FULL,
    operationId="clone_voice",
    tags=["voices"],
    summary="Clone a voice from a reference clip; answers the whole voice object." + _STORAGE_503,
    requestBody=CLONE_BODY,
    responses={200: json_body("The new voice.", Voice)},
    errors=(400, 413, 422, 500),
)
async def clone(request: web.Request) -> web.Response:
    """``POST /voices``: answer with the new voice object."""
    return web.json_response(clone_object(await create_voice(request)))


@routes.post(
    "/v1/voices/add",
    access=Access.FULL,
    operationId="add_voice",
    tags=["voices"],
    summary="Instant voice cloning (ElevenLabs shape of the answer)." + _STORAGE_503,
    requestBody=CLONE_BODY,
    responses={200: json_body("The new voice's id.", AddVoiceResponse)},
    errors=(400, 413, 422, 500),
)
async def add(request: web.Request) -> web.Response:
    """``POST /v1/voices/add`` (ElevenLabs instant voice cloning)."""
    voice = await create_voice(request)
    return web.json_response({"voice_id": voice.voice_id, "requires_verification": False})


@routes.delete("/v1/voices/{voice_id}", **_delete_doc("delete_voice_v1"))
@routes.delete("/voices/{voice_id}", **_delete_doc("delete_voice"))
async def delete(request: web.Request) -> web.Response:
    """``DELETE /voices/{voice_id}`` and ``DELETE /v1/voices/{voice_id}``: remove a cloned voice on every box."""
    voice_id = request.match_info["voice_id"]
    with _answering():
        await _service(request).delete(voice_id, _workspace(request))
    logger.info("request %s: removed voice %s", request[REQUEST_ID], voice_id)
    return web.json_response({"status": "ok"})


@routes.post(
    "/v1/voices/{voice_id}/edit",
    access=Access.FULL,
    operationId="edit_voice",
    tags=["voices"],
    summary="Rename, describe, relabel or re-record a cloned voice (the SDK's voices.update); built-in voices "
    "answer 400 voice_not_editable." + _STORAGE_503,
    path_params=_VOICE_ID,
    requestBody=EDIT_BODY,
    responses={200: json_body("Saved on every box.", EditResponse)},
    errors=(400, 404, 413, 422),
)
async def edit(request: web.Request) -> web.Response:
    """``POST /v1/voices/{voice_id}/edit`` (the SDK's ``voices.update``): name, description, labels, new clip.

    Fields left out keep their value; new ``files`` replace the reference (and so the voice's conditioning on every
    box). Built-in voices cannot be edited (their settings can, through ``settings/edit``).
    """
    voice_id = request.match_info["voice_id"]
    service, workspace = _service(request), _workspace(request)
    with _answering():
        await service.check_editable(voice_id, workspace)
    upload = await read_upload(request)
    name = _name(upload.fields.get("name"), required=False)
    changes: dict[str, Any] = {}
    if name is not None:
        changes["name"] = name
    if "description" in upload.fields:
        changes["description"] = upload.fields["description"].strip() or None
    if upload.fields.get("labels", "").strip() not in ("", "null"):  # the SDK sends "null" for "leave them"
        changes["labels"] = _labels(upload.fields["labels"])
    with _answering():
        changed = await service.edit(voice_id, workspace, changes, upload.files)
    logger.info("request %s: edited voice %s (%s)", request[REQUEST_ID], voice_id, ", ".join(changed))
    return web.json_response({"status": "ok"})


class VoiceSettingsEdit(BaseModel):
    """Any of the five settings; the ones sent are saved over the voice's saved ones (other fields are ignored, null
    keeps the saved value). They become the defaults of every job for the voice."""

    stability: float | None = None
    similarity_boost: float | None = None
    style: float | None = None
    use_speaker_boost: bool | None = None
    speed: float | None = None

    @pydantic.model_validator(mode="before")
    @classmethod
    def _check(cls, value: object) -> object:
        if not isinstance(value, dict):
            raise refusal(ApiCode.INVALID_PARAMETERS, "The body must be a JSON object of voice settings.")
        return checked_voice_settings(value)


@routes.post(
    "/v1/voices/{voice_id}/settings/edit",
    access=Access.FULL,
    body=VoiceSettingsEdit,
    operationId="edit_voice_settings",
    tags=["voices"],
    summary="Save a voice's settings (the SDK's voices.settings.update), built-in voices included; jobs for the "
    "voice start from them." + _STORAGE_503,
    path_params=_VOICE_ID,
    responses={200: json_body("Saved on every box.", EditResponse)},
    errors=(400, 404, 422),
)
async def edit_settings(request: web.Request) -> web.Response:
    """``POST /v1/voices/{voice_id}/settings/edit`` (the SDK's ``voices.settings.update``).

    The settings sent are merged over the voice's saved ones and saved; jobs for the voice start from them (a
    request's own ``voice_settings`` still win, field by field). Built-in voices may save settings too.
    """
    voice_id = request.match_info["voice_id"]
    voice = await voice_or_404(request, voice_id)
    try:
        # The message quotes the parser's complaint, so this handler reads its body itself (it takes no body=).
        raw = loads(await json_body_bytes(request, api_error))
    except BadJson as err:
        raise ApiError(400, ApiCode.INVALID_JSON, f"The body is not valid JSON: {err}") from err
    sent = validate(VoiceSettingsEdit, raw, api_error).model_dump(exclude_none=True)
    with _answering():
        builtin = await _service(request).save_settings(voice_id, _workspace(request), voice["settings"], sent)
    if builtin:
        logger.info("request %s: saved the settings of built-in voice %s", request[REQUEST_ID], voice_id)
    else:
        logger.info("request %s: edited voice %s (settings)", request[REQUEST_ID], voice_id)
    return web.json_response({"status": "ok"})
