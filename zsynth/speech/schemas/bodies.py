"""Request shapes shared by several speech routes: the text options, the error factory, required fields.

Each model validates with the messages the API has always answered: a field's before-validator refuses bad input
with :func:`~zsynth.kit.endpoints.refusal` (code, message and status kept), so pydantic's own complaints only come for
what no validator checks. Fields are declared in the order they are checked: the first complaint is the one answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final

import pydantic
from aiohttp import web
from pydantic import BaseModel, Field, ValidationInfo

from zsynth.core.codes import ApiCode
from zsynth.core.languages import UnsupportedLanguage, check_language_code
from zsynth.core.text.prepare import MAX_LOCATORS, TextOptionError, TextOptions, parse_locators, parse_normalization
from zsynth.core.voice_settings import InvalidParameter, check_voice_settings
from zsynth.kit import endpoints
from zsynth.kit.endpoints import MAX_TEXT_CHARS as MAX_TEXT_CHARS  # re-exported: the routes pass it in their context
from zsynth.kit.endpoints import Parsing, refusal
from zsynth.kit.errors import ApiError
from zsynth.services.keys import SETTINGS


def api_error(http_status: int, code: str, message: str, param: str | None) -> ApiError:
    """The speech API's error for a refused request (the error factory of :func:`~zsynth.kit.endpoints.parse_body`)."""
    return ApiError(http_status, code, message, param=param)


#: The validation context's key for the engine this deployment runs (the ``language_code`` check reads it).
ENGINE: Final = "engine"


def _context(request: web.Request) -> dict[str, Any]:
    settings = request.app[SETTINGS]
    return {MAX_TEXT_CHARS: settings.limits.max_text_chars, ENGINE: settings.engine}


#: How the speech API refuses declared bodies and queries: its envelope, and every text held to
#: ZSYNTH_MAX_TEXT_CHARS (a route's own ``bad_json`` message wins over this one).
PARSING: Final = Parsing(api_error, "The request body must be a JSON object.", context=_context)


def require(*names: str) -> Callable[[dict[str, Any]], None]:
    """A ``json_schema_extra`` hook listing ``names`` as required in the model's schema.

    A field whose absence must get the API's own message (not pydantic's "missing") has a default of None that its
    before-validator refuses (``validate_default``); JSON Schema cannot tell that apart from an optional field, so
    the hook says it.
    """

    def hook(schema: dict[str, Any]) -> None:
        schema["required"] = [*schema.get("required", []), *(n for n in names if n not in schema.get("required", []))]
        for name in names:
            schema.get("properties", {}).get(name, {}).pop("default", None)

    return hook


def refusing(check: Callable[[Any], object]) -> Callable[[object], object]:
    """A before-validator from a check that raises the API's own ApiError: its result, or the error as a refusal."""

    def validator(value: object) -> object:
        try:
            return check(value)
        except ApiError as err:
            raise refusal(err.code, err.message, err.http_status, param=err.param) from None

    return validator


def checked_voice_settings(value: object) -> dict[str, Any]:
    """Voice settings checked by :func:`zsynth.core.voice_settings.check_voice_settings` (the rule of every transport),
    its complaint as a refusal."""
    try:
        return check_voice_settings(value)
    except InvalidParameter as err:
        raise refusal(err.code, err.message, param=err.param) from None


#: The schema key that marks a spoken-text field; the speech document's builder turns it into this deployment's
#: ``maxLength`` (:mod:`zsynth.speech.openapi`), so no model or field is named there.
TEXT_LIMIT_MARKER: Final = "x-zsynth-text-limit"


def spoken_text(name: str, too_long: str) -> Any:
    """The metadata of the spoken-text field ``name`` (``Annotated[str, spoken_text(...)]``): required, not blank,
    at most the deployment's limit. ``too_long`` is the refusal's message, formatted with ``length`` and ``limit``."""

    def check(value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str) or not value.strip():
            raise refusal(ApiCode.INVALID_PARAMETERS, f"Field '{name}' is required and must be a non-empty string.")
        limit = text_limit(info)
        if len(value) > limit:
            raise refusal(ApiCode.MAX_CHARACTER_LIMIT_EXCEEDED, too_long.format(length=len(value), limit=limit), 400)
        return value

    return pydantic.BeforeValidator(check)


def optional_string(name: str, value: object) -> object:
    """A before-validator's check of an optional string field ``name``: None, or a string."""
    if value is not None and not isinstance(value, str):
        raise refusal(ApiCode.INVALID_PARAMETERS, f"Field '{name}' must be a string.")
    return value


#: The longest model id a request may name (ElevenLabs' ``model_id``, OpenAI's ``model``): it is echoed in the
#: ``x-model-id`` header and logged, so a longer one is refused rather than carried.
MAX_MODEL_ID_CHARS: Final = 128


def checked_model_id(name: str, value: object) -> object:
    """A before-validator's check of the model id field ``name``: None, or a string of at most
    :data:`MAX_MODEL_ID_CHARS` characters (any such name is served by this deployment's engine)."""
    optional_string(name, value)
    if isinstance(value, str) and len(value) > MAX_MODEL_ID_CHARS:
        raise refusal(
            ApiCode.INVALID_PARAMETERS, f"Field '{name}' must be a model id of at most {MAX_MODEL_ID_CHARS} characters."
        )
    return value


def model_id_field(description: str) -> Any:
    """The field of a model id (:func:`checked_model_id` is its before-validator): optional, its length documented."""
    return Field(default=None, max_length=MAX_MODEL_ID_CHARS, description=description)


def _language_code(value: object, info: ValidationInfo) -> object:
    engine = (info.context or {}).get(ENGINE)
    assert isinstance(engine, str), "the speech API passes its engine in the validation context"
    model = (info.data or {}).get("model_id")
    try:
        return check_language_code(engine, model if isinstance(model, str) else None, value)
    except UnsupportedLanguage as err:
        raise refusal(ApiCode.UNSUPPORTED_LANGUAGE, err.message, 400, param="language_code") from None


#: A body's ``language_code`` (declared after ``model_id``, which its refusal names): one of the engine's languages
#: (:mod:`zsynth.core.languages`), kept as its primary subtag, or None when absent or empty.
LanguageCode = Annotated[
    str | None,
    pydantic.BeforeValidator(_language_code),
    Field(
        default=None,
        description="ISO 639-1 language of the text: one of the engine's languages (GET /v1/models; en today) or "
        "empty. Others get 400 unsupported_language.",
    ),
]


def spoken_text_field() -> Any:
    """The field of every spoken-text field (with :func:`spoken_text`): its schema, and the check run on a missing
    value too, so a missing text gets the API's message."""
    return Field(
        default=None,
        validate_default=True,
        pattern=r"\S",
        description="The text to speak: not blank, at most ZSYNTH_MAX_TEXT_CHARS characters.",
        json_schema_extra={TEXT_LIMIT_MARKER: True},
    )


def text_limit(info: ValidationInfo) -> int:
    """The text limit the route passed in the validation context (every speech route passes one)."""
    limit = endpoints.text_limit(info)
    assert limit is not None, "the route passes ZSYNTH_MAX_TEXT_CHARS in the validation context"
    return limit


# ----- text options ------------------------------------------------------------------------------------------------


class PronunciationDictionaryLocator(BaseModel):
    """A dictionary whose rules apply to the text; without ``version_id``, its latest version."""

    pronunciation_dictionary_id: str = Field(pattern=r"\S")
    version_id: str | None = None


def _normalization(value: object) -> object:
    try:
        parse_normalization(value)
    except TextOptionError as err:
        raise refusal(err.code, err.message, err.http_status, param=err.param) from None
    return value


def _locators(value: object) -> object:
    try:
        parse_locators(value)
    except TextOptionError as err:
        raise refusal(err.code, err.message, err.http_status, param=err.param) from None
    return value


def one_of(*values: str) -> pydantic.WithJsonSchema:
    """The schema of a string field that is one of ``values`` or null (its validator checks, with the API's message)."""
    return pydantic.WithJsonSchema({"anyOf": [{"enum": list(values)}, {"type": "null"}]})


Normalization = Annotated[
    str | None,
    pydantic.BeforeValidator(_normalization),
    one_of("auto", "on", "off"),
    Field(
        default=None,
        json_schema_extra={"default": "auto"},
        description="Spell out numbers, money, times, dates, units and abbreviations (English) before speaking: on, "
        "off, or auto (the engines that need it: Chatterbox-Turbo).",
    ),
]
Locators = Annotated[
    Annotated[list[PronunciationDictionaryLocator], Field(max_length=MAX_LOCATORS)] | None,
    pydantic.BeforeValidator(_locators),
    Field(
        default=None,
        description="Dictionaries whose rules apply, in order; each must exist (404 otherwise).",
    ),
]


def text_options(normalization: str | None, locators: list[PronunciationDictionaryLocator] | None) -> TextOptions:
    """The text options of a validated body."""
    return TextOptions(
        normalization or "auto",
        tuple((item.pronunciation_dictionary_id, item.version_id or None) for item in locators or ()),
    )
