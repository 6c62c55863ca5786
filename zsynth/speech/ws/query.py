"""The query string of both realtime sockets (stream-input and multi-stream-input), as one model.

Every field is read as the sockets always read it (the first value of a parameter, an empty value as a missing
one) and refused with the sockets' own codes and messages; :func:`zsynth.speech.ws.connection.parse_params` turns a
refusal into an error frame and a 1008 close, after the upgrade. Fields are declared in the order they are checked: the
first complaint is the one answered.
"""

from __future__ import annotations

from typing import Annotated, Final

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from zsynth.core.audio import OutputFormat, OutputFormatError, parse_output_format
from zsynth.core.codes import ApiCode
from zsynth.core.voice_settings import InvalidParameter, check_seed
from zsynth.kit.endpoints import refusal

# The range ElevenLabs accepts for ?inactivity_timeout= (the server's own default may be set outside it).
MIN_INACTIVITY_S: Final = 5
MAX_INACTIVITY_S: Final = 180


def _output_format(value: object) -> OutputFormat:
    try:
        return parse_output_format(value if isinstance(value, str) else None, route="websocket")
    except OutputFormatError as err:
        raise refusal(ApiCode.INVALID_OUTPUT_FORMAT, str(err)) from None


def _inactivity(value: object) -> float | None:
    if not value:
        return None
    raw = str(value)
    try:
        seconds = int(raw)
    except ValueError:
        raise refusal(ApiCode.INVALID_PARAMETERS, "inactivity_timeout must be a whole number of seconds.") from None
    # The range is checked on the integer: a number too large for a float is out of range, not a crash.
    if not MIN_INACTIVITY_S <= seconds <= MAX_INACTIVITY_S:
        raise refusal(
            ApiCode.INVALID_PARAMETERS,
            f"inactivity_timeout must be a whole number of seconds from {MIN_INACTIVITY_S} to {MAX_INACTIVITY_S} "
            f"(got {raw if len(raw) <= 12 else raw[:12] + '...'}).",  # a hostile value is not echoed whole
        )
    return float(seconds)


def _seed(value: object) -> int | None:
    if not value:
        return None
    number: object
    try:
        number = int(str(value))
    except ValueError:
        number = value  # refused by check_seed, with the message HTTP gives
    try:
        return check_seed(number)
    except InvalidParameter as err:
        raise refusal(err.code, err.message) from None


def _flag(name: str) -> pydantic.PlainValidator:
    """A true/false parameter: true, 1, yes or false, 0, no (any case); empty is the default."""

    def check(value: object, info: pydantic.ValidationInfo) -> bool:
        if value is None or value == "":
            default = RealtimeQuery.model_fields[name].default
            assert isinstance(default, bool)
            return default
        lowered = str(value).lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise refusal(ApiCode.INVALID_PARAMETERS, f"Query parameter '{name}' must be true or false.")

    return pydantic.PlainValidator(check)


def _text(value: object) -> str | None:
    """An unchecked string parameter: None when missing or empty."""
    return str(value) if value else None


Text = Annotated[str | None, pydantic.PlainValidator(_text)]


class RealtimeQuery(BaseModel):
    """The query parameters of ``/v1/text-to-speech/{voice_id}/stream-input`` and ``/multi-stream-input``.

    Parameters the sockets do not read (``enable_ssml_parsing``, ``authorization``: read with the credential) are
    left out; ``apply_text_normalization`` is kept as sent and checked with the first message
    (:mod:`zsynth.speech.ws.text_options`), after authentication.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    output_format: Annotated[OutputFormat, pydantic.PlainValidator(_output_format)] = Field(
        default=None, validate_default=True, description="The audio format (default mp3_44100_128)."
    )
    inactivity_timeout: Annotated[float | None, pydantic.PlainValidator(_inactivity)] = Field(
        default=None,
        description=f"Seconds without input before the socket ends, {MIN_INACTIVITY_S}-{MAX_INACTIVITY_S} (None: "
        "the server's ZSYNTH_WS_INACTIVITY_TIMEOUT_S).",
    )
    seed: Annotated[int | None, pydantic.PlainValidator(_seed)] = None
    sync_alignment: Annotated[bool, _flag("sync_alignment")] = False
    auto_mode: Annotated[bool, _flag("auto_mode")] = False
    enable_logging: Annotated[bool, _flag("enable_logging")] = True
    model_id: Text = None
    language_code: Text = None
    apply_text_normalization: Text = None
