"""The headers a speech answer carries for its client (ElevenLabs clients read them), named once.

The routes write them (:func:`zsynth.speech.routes.tts.audio_headers`), the OpenAPI document describes them
(:data:`zsynth.speech.schemas.apidoc.AUDIO_HEADERS`) and CORS lets pages on other origins read them
(:data:`zsynth.speech.access.CORS_EXPOSE_HEADERS`). Every speech route sends them, the with-timestamps routes included.
"""

from __future__ import annotations

from typing import Final

REQUEST_ID_HEADER: Final = "request-id"  # the request's id (the caller's X-Request-ID when usable), in the logs
TRACE_ID_HEADER: Final = "x-trace-id"  # the request's trace id (its traceparent's), which LiveKit's plugin logs
CHARACTER_COST_HEADER: Final = "character-cost"  # characters billed: the text's length
HISTORY_ITEM_ID_HEADER: Final = "history-item-id"  # the synthesis job's id
VOICE_ID_HEADER: Final = "x-voice-id"  # the voice that spoke
MODEL_ID_HEADER: Final = "x-model-id"  # the request's model id, only when it named one

AUDIO_HEADER_NAMES: Final = (
    REQUEST_ID_HEADER,
    TRACE_ID_HEADER,
    CHARACTER_COST_HEADER,
    HISTORY_ITEM_ID_HEADER,
    VOICE_ID_HEADER,
    MODEL_ID_HEADER,
)
