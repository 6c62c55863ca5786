"""The realtime sockets' message models: the lax reading upstream clients rely on, and each refusal's frame."""

from __future__ import annotations

import pytest

from zsynth.avatar.messages import ControlMessage, SpeakCommand
from zsynth.speech.ws.buffer import DEFAULT_SCHEDULE
from zsynth.speech.ws.connection import WsError
from zsynth.speech.ws.messages import ContextMessage, ContextOpening, TextMessage, read

pytestmark = pytest.mark.unit


def refused(model, message, max_chars=None) -> tuple[str, str]:
    with pytest.raises(WsError) as err:
        read(model, message, max_chars)
    return err.value.code, err.value.message


def test_text_messages_read_flags_by_truth_and_null_text_as_empty():
    message = read(TextMessage, {"text": None, "flush": 1, "try_trigger_generation": "yes", "xi_api_key": "k"})
    assert (message.text, message.flush, message.try_trigger_generation) == ("", True, True)
    assert read(TextMessage, {}).text == "" and not read(TextMessage, {"flush": 0}).flush
    assert refused(TextMessage, {"text": 5}) == ("invalid_message", "Field 'text' must be a string.")
    code, text = refused(TextMessage, {"text": "x" * 11}, 10)
    assert code == "max_character_limit_exceeded" and "10 characters" in text


def test_context_messages_check_the_context_first_and_closing_reads_nothing_else():
    assert refused(ContextMessage, {"context_id": 5, "text": 5})[1] == "Field 'context_id' must be a string."
    closing = read(ContextMessage, {"close_socket": True, "context_id": 5, "text": 5})
    assert closing.close_socket and closing.context_id is None
    closing = read(ContextMessage, {"close_context": 1, "context_id": "a", "text": 5}, 1)
    assert closing.close_context and closing.context_id == "a"
    assert refused(ContextMessage, {"close_context": True, "context_id": []})[0] == "invalid_message"
    message = read(ContextMessage, {"context_id": "a", "text": "hi", "flush": True})
    assert (message.context_id, message.text, message.flush, message.close_context) == ("a", "hi", True, False)


def test_a_context_opening_reads_either_config_name():
    assert read(ContextOpening, {}).generation_config.chunk_length_schedule == DEFAULT_SCHEDULE
    other = {"generation_config": None, "generator_config": {"chunk_length_schedule": [50, 90]}}
    assert read(ContextOpening, other).generation_config.chunk_length_schedule == (50, 90)
    assert refused(ContextOpening, {"generation_config": [1]}) == (
        "invalid_message",
        "Field 'generation_config' must be an object.",
    )
    assert refused(ContextOpening, {"generation_config": {"chunk_length_schedule": [True]}})[0] == "invalid_message"


def test_control_commands_keep_their_codes():
    assert read(ControlMessage, {"type": "speak", "extra": 1}).type == "speak"
    assert refused(ControlMessage, {"type": 3})[0] == "invalid_message"
    assert refused(SpeakCommand, {"text": "  "})[0] == "invalid_text"
    assert refused(SpeakCommand, {"text": "abc"}, 2) == ("text_too_long", "'text' exceeds 2 characters.")
    assert refused(SpeakCommand, {"text": 5, "voice_id": ""})[0] == "invalid_text"  # the text is checked first
    assert refused(SpeakCommand, {"text": "hi", "voice_id": ""})[0] == "invalid_voice_id"
    speak = read(SpeakCommand, {"text": " hi ", "voice_id": "v"})
    assert (speak.text, speak.voice_id) == (" hi ", "v")
