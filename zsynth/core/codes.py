"""Every error code a client of zsynth can get, in one place, and the one exception that carries a code.

The HTTP routes, both speech sockets, Wyoming's ``error`` events and the avatar server answer a failure with a code
(ElevenLabs' ``detail.status``/``detail.code``, OpenAI's ``error.code``, a socket frame's ``error``, an avatar event's
``code``) from :class:`ApiCode`; the envelope's ``type`` is an :class:`ErrorType`. A job's own codes (a worker's
``error`` event on Redis) are :class:`zsynth.core.protocol.ErrorCode`; where a job's code reaches a client as it is
(``voice_not_found``, ``audio_too_long``) both enums name it, with the same value.

The values are the wire form: clients match on them, so a value never changes. Product code names a code only
through these enums (``tests/test_codes.py`` fails on a code written as a string anywhere else).
"""

from __future__ import annotations

from enum import StrEnum


class ApiCode(StrEnum):
    """An error code as a client reads it."""

    ALREADY_ATTACHED = "already_attached"
    AUDIO_LIMIT_EXCEEDED = "audio_limit_exceeded"
    AUDIO_TOO_LONG = "audio_too_long"
    AUDIO_TOO_SHORT = "audio_too_short"
    AVATAR_NOT_FOUND = "avatar_not_found"
    CAPACITY = "capacity"
    CLIP_TOO_LARGE = "clip_too_large"
    CONTEXT_NOT_FOUND = "context_not_found"
    CROSS_ORIGIN_REFUSED = "cross_origin_refused"
    DICTIONARY_STORAGE_UNAVAILABLE = "dictionary_storage_unavailable"
    EVENT_TOO_LARGE = "event_too_large"
    HOST_NOT_ALLOWED = "host_not_allowed"
    INPUT_TIMEOUT_EXCEEDED = "input_timeout_exceeded"
    INTERNAL_ERROR = "internal_error"
    INVALID_API_KEY = "invalid_api_key"
    INVALID_AUDIO = "invalid_audio"
    INVALID_CONTENT_TYPE = "invalid_content_type"
    INVALID_EVENT = "invalid_event"
    INVALID_JSON = "invalid_json"
    INVALID_MESSAGE = "invalid_message"
    INVALID_MULTIPART = "invalid_multipart"
    INVALID_OUTPUT_FORMAT = "invalid_output_format"
    INVALID_PARAMETERS = "invalid_parameters"
    INVALID_PLS = "invalid_pls"
    INVALID_REQUEST = "invalid_request"
    INVALID_RESPONSE_FORMAT = "invalid_response_format"
    INVALID_SAMPLE_RATE = "invalid_sample_rate"
    INVALID_SDP = "invalid_sdp"
    INVALID_TEXT = "invalid_text"
    INVALID_VOICE_ID = "invalid_voice_id"
    MAX_ACTIVE_CONVERSATIONS = "max_active_conversations"
    MAX_CHARACTER_LIMIT_EXCEEDED = "max_character_limit_exceeded"
    MESSAGE_TOO_LARGE = "message_too_large"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    MISSING_API_KEY = "missing_api_key"
    MISSING_FIRST_MESSAGE = "missing_first_message"
    NO_STREAM = "no_stream"
    NOT_FOUND = "not_found"
    NOT_SUPPORTED = "not_supported"
    PAUSE_LIMIT_EXCEEDED = "pause_limit_exceeded"
    PRONUNCIATION_DICTIONARY_NOT_FOUND = "pronunciation_dictionary_not_found"
    PRONUNCIATION_DICTIONARY_UNREADABLE = "pronunciation_dictionary_unreadable"
    PRONUNCIATION_DICTIONARY_VERSION_NOT_FOUND = "pronunciation_dictionary_version_not_found"
    RATE_LIMIT_EXCEEDED = "rate_limit_exceeded"
    REQUEST_TOO_LARGE = "request_too_large"
    SDP_TOO_LARGE = "sdp_too_large"
    SERVICE_UNAVAILABLE = "service_unavailable"
    SESSION_NOT_FOUND = "session_not_found"
    SIGNALLING_FAILED = "signalling_failed"
    SILENT_AUDIO = "silent_audio"
    STREAM_ALREADY_STARTED = "stream_already_started"
    SYNTHESIS_UNAVAILABLE = "synthesis_unavailable"
    SYSTEM_BUSY = "system_busy"
    TEXT_TOO_LONG = "text_too_long"
    TOO_MANY_CANDIDATES = "too_many_candidates"
    TOO_MANY_CONCURRENT_REQUESTS = "too_many_concurrent_requests"
    TOO_MANY_CONNECTIONS = "too_many_connections"
    TOO_MANY_FILES = "too_many_files"
    TOO_MANY_INPUTS = "too_many_inputs"
    TOO_MANY_PARTS = "too_many_parts"
    TOO_MANY_REQUESTS = "too_many_requests"
    TOO_MANY_SESSIONS = "too_many_sessions"
    TOO_MANY_VOICES = "too_many_voices"
    UNKNOWN_COMMAND = "unknown_command"
    UNSUPPORTED_LANGUAGE = "unsupported_language"
    UNSUPPORTED_TOKEN_TYPE = "unsupported_token_type"
    UPSTREAM_INVALID = "upstream_invalid"
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    VOICE_NOT_DELETABLE = "voice_not_deletable"
    VOICE_NOT_EDITABLE = "voice_not_editable"
    VOICE_NOT_FOUND = "voice_not_found"
    VOICE_NOT_REGISTERED = "voice_not_registered"
    VOICE_STORAGE_UNAVAILABLE = "voice_storage_unavailable"


class ErrorType(StrEnum):
    """The class of an error: ElevenLabs' ``detail.type`` (by HTTP status) and OpenAI's ``error.type``."""

    VALIDATION = "validation_error"
    AUTHENTICATION = "authentication_error"
    AUTHORIZATION = "authorization_error"
    NOT_FOUND = "not_found"
    INVALID_REQUEST = "invalid_request"
    RATE_LIMIT = "rate_limit_error"
    NOT_SUPPORTED = "not_supported"
    SERVICE_UNAVAILABLE = "service_unavailable"
    INTERNAL = "internal_error"
    # OpenAI's own names
    PERMISSION = "permission_error"
    INVALID_REQUEST_ERROR = "invalid_request_error"
    SERVER = "server_error"


class CodedError(Exception):
    """An error with a wire ``code`` and a ``message`` that is safe to show to the caller.

    Each layer's refusal (an HTTP answer, a socket's error frame, a Wyoming ``error`` event, a refused clip or text
    option, a failed job) is one of these; what it adds (an HTTP status, the request field at fault) is its own.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
