"""Pronunciation dictionaries, as the ElevenLabs SDK's ``pronunciation_dictionaries`` client calls them.

``POST /v1/pronunciation-dictionaries/add-from-file`` (multipart: ``name``, ``file`` = a PLS lexicon,
``description``), ``POST .../add-from-rules`` (JSON), ``GET /v1/pronunciation-dictionaries`` (paged),
``GET .../{id}``, ``PATCH .../{id}`` (``name``, ``archived``), ``POST .../{id}/add-rules``, ``.../remove-rules`` and
``.../set-rules`` (each makes a new version), ``GET .../{id}/{version_id}/download`` (the version as PLS) and
``DELETE .../{id}`` (the dictionary and its versions, for every front).

Managing needs a full key: ephemeral tokens are refused by the auth middleware on every path here (they may still
name dictionaries in ``pronunciation_dictionary_locators`` when they synthesize). Archiving only hides a
dictionary from the list: requests that name it keep working, as upstream. A dictionary stored in a form this
front cannot use (rules these checks refuse, written by another program) is 422
``pronunciation_dictionary_unreadable``; ``set-rules`` replaces its rules and ``DELETE`` removes it.

The use cases (the workspace rule, uploads, rule edits) are the dictionary service's
(:class:`zsynth.services.dictionaries.DictionaryService`): these routes parse the request, call it and answer. The
rule and response shapes are in :mod:`zsynth.speech.schemas.dictionaries`; the store's lifecycle is
:func:`zsynth.services.dictionaries.dictionaries_context`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Annotated, Any, Final, TypeVar

import pydantic
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from zsynth.core.codes import ApiCode
from zsynth.kit.endpoints import Access, Endpoints, Later, refusal
from zsynth.kit.errors import ApiError
from zsynth.kit.multipart import BoundedMultipart
from zsynth.services.auth import CREDENTIAL, workspace_of
from zsynth.services.dictionaries import (
    Dictionary,
    DictionaryNotFound,
    DictionaryService,
    DictionaryUnreadable,
    InvalidLexicon,
    Rule,
    RuleError,
    StorageUnavailable,
    TooManyRules,
    VersionNotFound,
    dictionary_service,
    parse_rules,
)
from zsynth.services.keys import REQUEST_ID, SETTINGS
from zsynth.speech.schemas.apidoc import json_body
from zsynth.speech.schemas.bodies import one_of, refusing, require
from zsynth.speech.schemas.dictionaries import (
    ADD_FROM_FILE_BODY,
    MAX_NAME_CHARS,
    WORKSPACE_ACCESS,
    DictionaryCreated,
    DictionaryDeleted,
    DictionaryPage,
    DictionaryVersion,
    DictionaryWithRules,
    PronunciationRule,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

routes = Endpoints()

BASE: Final = "/v1/pronunciation-dictionaries"
MAX_LEXICON_BYTES: Final = 1024 * 1024
MAX_LEXICON_BODY_BYTES: Final = 2 * MAX_LEXICON_BYTES
PERMISSION: Final = "admin"
CREATED_BY: Final = "zsynth"
TAG: Final = "pronunciation dictionaries"
_ID: Final = {"dictionary_id": "The dictionary's id."}


def _unavailable(err: StorageUnavailable) -> ApiError:
    # The storage's own words (its endpoint, bucket and object keys) go to the log, never to the caller.
    logger.warning("the pronunciation dictionaries' storage cannot be reached: %s", err)
    return ApiError(
        503,
        ApiCode.DICTIONARY_STORAGE_UNAVAILABLE,
        "The pronunciation dictionaries' storage cannot be reached; nothing was changed.",
        headers={"Retry-After": "1"},
    )


def _not_found(dictionary_id: str) -> ApiError:
    return ApiError(
        404,
        ApiCode.PRONUNCIATION_DICTIONARY_NOT_FOUND,
        f"Pronunciation dictionary {dictionary_id!r} was not found.",
        param="pronunciation_dictionary_id",
    )


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(422, ApiCode.INVALID_PARAMETERS, message, param=param)


def _name(raw: object) -> str:
    if not isinstance(raw, str) or not raw.strip() or len(raw) > MAX_NAME_CHARS:
        raise _bad(f"Field 'name' is required: a string of 1 to {MAX_NAME_CHARS} characters.", "name")
    return raw


def _description(raw: object) -> str | None:
    if raw in (None, "", "null"):
        return None
    if not isinstance(raw, str) or len(raw) > 4000:
        raise _bad("Field 'description' must be a string of at most 4000 characters.", "description")
    return raw


def _workspace_access(raw: object) -> None:
    """Checked and ignored: a dictionary here belongs to whoever holds a full key."""
    if raw not in (None, "") and raw not in WORKSPACE_ACCESS:
        raise _bad(f"Field 'workspace_access' must be one of {', '.join(WORKSPACE_ACCESS)}.", "workspace_access")


def _created(dictionary: Dictionary) -> dict[str, Any]:
    return {
        "id": dictionary.id,
        "name": dictionary.name,
        "created_by": CREATED_BY,
        "creation_time_unix": dictionary.created_at,
        "version_id": dictionary.version_id,
        "version_rules_num": len(dictionary.rules),
        "description": dictionary.description,
        "permission_on_resource": PERMISSION,
    }


def _metadata(meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": meta["id"],
        "latest_version_id": meta["latest_version_id"],
        "latest_version_rules_num": meta["latest_version_rules_num"],
        "name": meta["name"],
        "permission_on_resource": PERMISSION,
        "created_by": CREATED_BY,
        "creation_time_unix": meta["creation_time_unix"],
        "archived_time_unix": meta.get("archived_time_unix"),
        "description": meta.get("description"),
    }


def _rules(value: object) -> object:
    try:
        return [rule.to_json() for rule in parse_rules(value)]
    except RuleError as err:
        raise refusal(ApiCode.INVALID_PARAMETERS, str(err), param="rules") from None


def _rule_strings(value: object) -> object:
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise refusal(ApiCode.INVALID_PARAMETERS, "Field 'rule_strings' must be a list of strings.")
    return value


def _archived(value: object) -> object:
    if value is not None and not isinstance(value, bool):
        raise refusal(ApiCode.INVALID_PARAMETERS, "Field 'archived' must be true or false.")
    return value


Name = Annotated[
    Annotated[str, Field(pattern=r"\S", max_length=MAX_NAME_CHARS)], pydantic.BeforeValidator(refusing(_name))
]
Rules = Annotated[list[PronunciationRule], pydantic.BeforeValidator(_rules)]


class AddFromRulesRequest(BaseModel):
    """A new dictionary from a list of rules."""

    model_config = ConfigDict(json_schema_extra=require("name", "rules"))

    name: Name = Field(default=None, validate_default=True)
    description: Annotated[
        Annotated[str, Field(max_length=4000)] | None, pydantic.BeforeValidator(refusing(_description))
    ] = None
    workspace_access: Annotated[
        str | None, pydantic.BeforeValidator(refusing(_workspace_access)), one_of(*WORKSPACE_ACCESS, "")
    ] = Field(default=None, description="Checked and ignored (empty: none).")
    rules: Rules = Field(default=None, validate_default=True)


class RulesRequest(BaseModel):
    """The rules of a new version (added to the latest ones, or replacing them)."""

    model_config = ConfigDict(json_schema_extra=require("rules"))

    rules: Rules = Field(default=None, validate_default=True)

    def parsed(self) -> list[Rule]:
        """The rules as the store keeps them."""
        return [rule.to_rule() for rule in self.rules]


class RemoveRulesRequest(BaseModel):
    """The strings whose rules a new version drops."""

    model_config = ConfigDict(json_schema_extra=require("rule_strings"))

    rule_strings: Annotated[list[str], pydantic.BeforeValidator(_rule_strings)] = Field(
        default=None, validate_default=True
    )


class DictionaryUpdate(BaseModel):
    """A new name, or archiving (no new version is made)."""

    name: Annotated[
        Annotated[str, Field(pattern=r"\S", max_length=MAX_NAME_CHARS)] | None,
        pydantic.BeforeValidator(lambda v: None if v is None else refusing(_name)(v)),
    ] = None
    archived: Annotated[bool | None, pydantic.BeforeValidator(_archived)] = None


_CREATED: Final = json_body("The new dictionary and its first version.", DictionaryCreated)
_WITH_RULES: Final = json_body("The dictionary and its latest rules.", DictionaryWithRules)


def _rules_doc(operation_id: str, summary: str, body: type[BaseModel]) -> dict[str, Any]:
    return {
        "access": Access.FULL,
        "body": body,
        "operationId": operation_id,
        "tags": [TAG],
        "summary": summary,
        "path_params": _ID,
        "responses": {200: json_body("The new version.", DictionaryVersion)},
        "errors": (400, 404, 422),
    }


def unreadable(err: DictionaryUnreadable) -> ApiError:
    """The answer for a dictionary stored in a form this front cannot use (written by another program or version)."""
    return ApiError(422, ApiCode.PRONUNCIATION_DICTIONARY_UNREADABLE, str(err), param="pronunciation_dictionary_id")


def _workspace(request: web.Request) -> str:
    """The caller's workspace: the only one whose dictionaries it sees (:mod:`zsynth.core.workspaces`)."""
    return workspace_of(request.get(CREDENTIAL))


def _service(request: web.Request) -> DictionaryService:
    return dictionary_service(request.app)


async def _answer(call: Awaitable[T]) -> T:
    """The service's answer, its errors mapped to the API's envelope."""
    try:
        return await call
    except StorageUnavailable as err:
        raise _unavailable(err) from err
    except DictionaryUnreadable as err:
        raise unreadable(err) from err
    except RuleError as err:  # rules these checks accept but the matcher cannot compile
        raise _bad(str(err), "rules") from err
    except DictionaryNotFound as err:
        raise _not_found(err.dictionary_id) from err
    except TooManyRules as err:
        raise _bad(str(err), "rules") from err


async def _dictionary(request: web.Request, *, with_rules: bool = True) -> Dictionary:
    dictionary_id = request.match_info["dictionary_id"]
    return await _answer(_service(request).get(dictionary_id, _workspace(request), with_rules=with_rules))


@routes.post(
    f"{BASE}/add-from-rules",
    access=Access.FULL,
    body=AddFromRulesRequest,
    operationId="add_dictionary_from_rules",
    tags=[TAG],
    summary="A new dictionary from a list of rules.",
    responses={200: _CREATED},
    errors=(400, 413, 422),
)
async def add_from_rules(request: web.Request, body: AddFromRulesRequest) -> web.Response:
    """A new dictionary from a JSON list of rules."""
    rules = [rule.to_rule() for rule in body.rules]
    dictionary = await _answer(_service(request).create(body.name, body.description, rules, _workspace(request)))
    logger.info("request: dictionary %s created from %d rules", dictionary.id, len(rules))
    return web.json_response(_created(dictionary))


async def _read_lexicon(request: web.Request) -> tuple[dict[str, str], bytes | None]:
    if not request.content_type.startswith("multipart/"):
        raise ApiError(400, ApiCode.INVALID_CONTENT_TYPE, "Send multipart/form-data with 'name' and a PLS 'file'.")
    settings = request.app[SETTINGS]
    # The whole body (boundaries and part headers too) is bounded: a lexicon and a few short fields.
    limit = min(settings.limits.max_body_bytes, MAX_LEXICON_BODY_BYTES)
    body = BoundedMultipart(request, max_bytes=limit, max_parts=settings.limits.max_multipart_parts)
    too_large = ApiError(413, ApiCode.REQUEST_TOO_LARGE, f"A PLS upload is limited to {MAX_LEXICON_BYTES} bytes.")
    fields: dict[str, str] = {}
    lexicon: bytes | None = None
    while (part := await body.next()) is not None:
        data = await body.read(part, MAX_LEXICON_BYTES, too_large)
        if part.name == "file":
            lexicon = data
        elif part.name:
            fields[part.name] = data.decode("utf-8", "replace")
    return fields, lexicon


@routes.post(
    f"{BASE}/add-from-file",
    access=Access.FULL,
    operationId="add_dictionary_from_file",
    tags=[TAG],
    summary="A new dictionary from a PLS lexicon.",
    requestBody=ADD_FROM_FILE_BODY,
    responses={200: _CREATED},
    errors=(400, 413, 422),
)
async def add_from_file(request: web.Request) -> web.Response:
    """A new dictionary from an uploaded PLS lexicon."""
    fields, lexicon = await _read_lexicon(request)
    name, description = _name(fields.get("name")), _description(fields.get("description"))
    _workspace_access(fields.get("workspace_access"))
    if not lexicon:
        raise _bad("Field 'file' (a PLS lexicon) is required.", "file")
    try:
        dictionary = await _answer(_service(request).create_from_pls(name, description, lexicon, _workspace(request)))
    except InvalidLexicon as err:
        raise ApiError(400, ApiCode.INVALID_PLS, str(err), param="file") from err
    logger.info("request: dictionary %s created from a lexicon of %d rules", dictionary.id, len(dictionary.rules))
    return web.json_response(_created(dictionary))


class DictionaryListQuery(BaseModel):
    """The query of the dictionary listing."""

    cursor: str | None = Field(default=None, description="The next_cursor of the previous page.")
    page_size: int = Field(default=30, ge=1, le=100, description="Page size.")
    sort: Annotated[str, WithJsonSchema({"enum": ["creation_time_unix", "name"]})] = Field(
        default="creation_time_unix", description="Sort key (default creation time)."
    )
    sort_direction: Annotated[str, WithJsonSchema({"enum": ["ASCENDING", "DESCENDING"]})] = Field(
        default="DESCENDING", description="Default DESCENDING."
    )
    include_archived: bool = Field(default=False, description="List archived dictionaries too.")

    @pydantic.model_validator(mode="before")
    @classmethod
    def _check(cls, raw: object) -> object:
        # One check over several fields, in the order (and with the messages) this route has always answered.
        query: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
        try:
            page_size = int(query.get("page_size") or 30)
            offset = int(query.get("cursor") or 0)
        except ValueError:
            raise refusal(ApiCode.INVALID_PARAMETERS, "page_size and cursor must be whole numbers.") from None
        if not 1 <= page_size <= 100 or offset < 0:
            raise refusal(ApiCode.INVALID_PARAMETERS, "page_size must be 1 to 100.", param="page_size")
        sort = query.get("sort") or "creation_time_unix"
        direction = query.get("sort_direction") or "DESCENDING"
        archived = str(query.get("include_archived") or "false").lower()
        if sort not in ("creation_time_unix", "name") or direction not in ("ASCENDING", "DESCENDING"):
            raise refusal(
                ApiCode.INVALID_PARAMETERS,
                "sort must be creation_time_unix or name; sort_direction ASCENDING or DESCENDING.",
                param="sort",
            )
        if archived not in ("true", "false"):
            raise refusal(
                ApiCode.INVALID_PARAMETERS, "include_archived must be true or false.", param="include_archived"
            )
        return {
            "cursor": str(offset),
            "page_size": page_size,
            "sort": sort,
            "sort_direction": direction,
            "include_archived": archived == "true",
        }


@routes.get(
    BASE,
    access=Access.FULL,
    query=DictionaryListQuery,
    operationId="list_dictionaries",
    tags=[TAG],
    summary="Dictionaries, paged.",
    responses={200: json_body("One page.", DictionaryPage)},
    errors=(422,),
)
async def list_dictionaries(request: web.Request, query: DictionaryListQuery) -> web.Response:
    """Every dictionary, newest first (``sort=name`` by name), paged by ``cursor`` and ``page_size`` (1-100)."""
    page_size, offset = query.page_size, int(query.cursor or 0)
    metas = await _answer(
        _service(request).listing(
            _workspace(request),
            include_archived=query.include_archived,
            by_name=query.sort == "name",
            descending=query.sort_direction == "DESCENDING",
        )
    )
    page = metas[offset : offset + page_size]
    more = offset + page_size < len(metas)
    return web.json_response(
        {
            "pronunciation_dictionaries": [_metadata(m) for m in page],
            "next_cursor": str(offset + page_size) if more else None,
            "has_more": more,
        }
    )


@routes.get(
    BASE + "/{dictionary_id}",
    access=Access.FULL,
    operationId="get_dictionary",
    tags=[TAG],
    summary="A dictionary with its latest rules.",
    path_params=_ID,
    responses={200: _WITH_RULES},
    errors=(404, 422),
)
async def get_dictionary(request: web.Request) -> web.Response:
    """The dictionary with its latest version's rules."""
    dictionary = await _dictionary(request)
    meta = await _answer(_service(request).metadata(dictionary, _workspace(request)))
    body = _metadata(meta) | {"rules": [rule.to_json() for rule in dictionary.rules]}
    return web.json_response(body)


@routes.patch(
    BASE + "/{dictionary_id}",
    access=Access.FULL,
    body=DictionaryUpdate,
    operationId="update_dictionary",
    tags=[TAG],
    summary="Rename or archive a dictionary (no new version).",
    path_params=_ID,
    responses={200: _WITH_RULES},
    errors=(400, 404, 422),
)
async def update_dictionary(request: web.Request, body: Later[DictionaryUpdate]) -> web.Response:
    """Rename or archive (``archived: true``) a dictionary; no new version is made."""
    dictionary = await _dictionary(request)
    update = await body.read()
    service = _service(request)
    meta = await _answer(service.update(dictionary, _workspace(request), name=update.name, archived=update.archived))
    return web.json_response(_metadata(meta) | {"rules": [rule.to_json() for rule in dictionary.rules]})


@routes.delete(
    BASE + "/{dictionary_id}",
    access=Access.FULL,
    operationId="delete_dictionary",
    tags=[TAG],
    summary="Delete a dictionary and every version of it, for every front (within 2 s on the others).",
    path_params=_ID,
    responses={200: json_body("The dictionary and its versions are gone.", DictionaryDeleted)},
    errors=(404,),
)
async def delete_dictionary(request: web.Request) -> web.Response:
    """Delete a dictionary and its versions; requests that name it get 404 from then on, on every front."""
    dictionary_id = request.match_info["dictionary_id"]
    await _answer(_service(request).delete(dictionary_id, _workspace(request)))
    logger.info("request %s: dictionary %s deleted", request[REQUEST_ID], dictionary_id)
    return web.json_response({"status": "ok"})


def _new_version(saved: Dictionary) -> web.Response:
    rules = len(saved.rules)
    logger.info("request: dictionary %s version %s (%d rules)", saved.id, saved.version_id, rules)
    return web.json_response({"id": saved.id, "version_id": saved.version_id, "version_rules_num": rules})


@routes.post(
    BASE + "/{dictionary_id}/add-rules",
    **_rules_doc("add_dictionary_rules", "A new version with these rules added (same string: replaced).", RulesRequest),
)
async def add_rules(request: web.Request, body: Later[RulesRequest]) -> web.Response:
    """A new version with the rules added (a rule for a string already there replaces it)."""
    dictionary = await _dictionary(request)
    added = (await body.read()).parsed()
    return _new_version(await _answer(_service(request).add_rules(dictionary, added)))


@routes.post(
    BASE + "/{dictionary_id}/remove-rules",
    **_rules_doc("remove_dictionary_rules", "A new version without the rules for these strings.", RemoveRulesRequest),
)
async def remove_rules(request: web.Request, body: Later[RemoveRulesRequest]) -> web.Response:
    """A new version without the rules whose ``string_to_replace`` is listed."""
    dictionary = await _dictionary(request)
    removed = set((await body.read()).rule_strings)
    return _new_version(await _answer(_service(request).remove_rules(dictionary, removed)))


@routes.post(
    BASE + "/{dictionary_id}/set-rules",
    **_rules_doc("set_dictionary_rules", "A new version holding exactly these rules.", RulesRequest),
)
async def set_rules(request: web.Request, body: Later[RulesRequest]) -> web.Response:
    """A new version holding exactly the given rules (the latest ones are not read: this mends a version that
    cannot be read)."""
    dictionary = await _dictionary(request, with_rules=False)
    rules = (await body.read()).parsed()
    return _new_version(await _answer(_service(request).set_rules(dictionary, rules)))


@routes.get(
    BASE + "/{dictionary_id}/{version_id}/download",
    access=Access.FULL,
    operationId="download_dictionary_version",
    tags=[TAG],
    summary="One version as a PLS lexicon.",
    path_params={**_ID, "version_id": "The version's id."},
    responses={
        200: {
            "description": "The version as a PLS lexicon.",
            "content": {"application/pls+xml": {"schema": {"type": "string"}}},
        }
    },
    errors=(404, 422),
)
async def download(request: web.Request) -> web.Response:
    """One version as a PLS lexicon."""
    dictionary_id, version_id = request.match_info["dictionary_id"], request.match_info["version_id"]
    try:
        body = await _answer(_service(request).download(dictionary_id, version_id, _workspace(request)))
    except VersionNotFound as err:
        raise ApiError(
            404,
            ApiCode.PRONUNCIATION_DICTIONARY_VERSION_NOT_FOUND,
            f"Pronunciation dictionary {dictionary_id!r} has no version {version_id!r}.",
            param="version_id",
        ) from err
    return web.Response(
        body=body,
        content_type="application/pls+xml",
        headers={"Content-Disposition": f'attachment; filename="{dictionary_id}-{version_id}.pls"'},
    )
