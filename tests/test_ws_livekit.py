"""LiveKit Agents' ElevenLabs TTS plugin, unchanged, through one conversation against the full local stack.

The plugin keeps one multi-stream-input socket for the whole conversation and speaks each turn in a new context
(``auto_mode=true``, ``sync_alignment=true``, ``inactivity_timeout=180``, key in the ``xi-api-key`` header). What it
does on the wire is observed on the server side, in the front's socket log: how many sockets it opened, whether any
was ended with an error frame, and the close code.
"""

from __future__ import annotations

import asyncio
import logging
import re

import aiohttp
import pytest
from livekit.plugins import elevenlabs

from harness.audio import assert_speech
from harness.base import make_settings
from zsynth.speech.app import create_app

from .helpers import socket_log_after_close
from .livekit_helpers import CONN, Turn, speak

pytestmark = pytest.mark.stack

KEY = "sk-livekit-agent"
#: The front's default socket timeouts, cut from 20 s and 10 s so that the agent's idle start outlasts both in seconds.
INACTIVITY_S, FIRST_MESSAGE_S = 2.0, 1.0
IDLE_S = 2.5  # longer than the front's default inactivity timeout and its first-message bound
TURN_ONE = "Hello! I am the assistant of this test. How can I help you today?"
TURN_TWO = "Sure, the weather tomorrow looks sunny. Expect a light breeze in the afternoon, and a cool evening."
TURN_THREE = [f"Let me tell you a long story, part {n}, which the user will interrupt." for n in range(8)]


def tokens(text: str) -> list[str]:
    """The text cut the way an LLM streams it: words and punctuation, each with its leading space."""
    return re.findall(r"\s*[\w']+|\s*[^\w\s]", text)


@pytest.fixture
async def server(aiohttp_client, redis_url, data_dir, shared_workers):
    """A keyed front whose default socket timeouts (20 s inactivity, 10 s first-message bound as shipped) are
    :data:`INACTIVITY_S` and :data:`FIRST_MESSAGE_S`: the plugin's own ``inactivity_timeout`` and its key in the
    header must keep its socket through an idle start longer than either."""
    settings = make_settings(
        redis_url,
        data_dir,
        auth_api_keys=(KEY,),
        ws_inactivity_timeout_s=INACTIVITY_S,
        ws_first_message_timeout_s=FIRST_MESSAGE_S,
    )
    return await aiohttp_client(create_app(settings))


async def test_livekit_agent_conversation(server, caplog):
    caplog.set_level(logging.INFO, logger="zsynth.speech.ws")
    async with aiohttp.ClientSession() as session:
        tts = elevenlabs.TTS(
            api_key=KEY,
            voice_id="any-voice",
            base_url=f"http://127.0.0.1:{server.server.port}/v1",
            http_session=session,
        )
        # The agent connects at start-up and waits for its user, saying nothing.
        tts.prewarm()
        await asyncio.sleep(IDLE_S)

        first = await speak(tts.stream(conn_options=CONN), [TURN_ONE])
        assert_speech(first.samples, first.rate, TURN_ONE)
        first.check_words(TURN_ONE)

        second = await speak(tts.stream(conn_options=CONN), tokens(TURN_TWO))
        assert_speech(second.samples, second.rate, TURN_TWO)
        second.check_words(TURN_TWO)

        # The third turn is interrupted: the agent closes its stream once the first audio plays.
        stream = tts.stream(conn_options=CONN)
        for sentence in TURN_THREE:
            stream.push_text(sentence + " ")
        third = Turn()
        async for event in stream:
            third.add(event)
            if third.seconds >= 0.5:
                break
        await stream.aclose()
        assert 0.5 <= third.seconds < 4 * len(TURN_THREE), third.seconds
        # Speech, not silence (the length band of a text as long as the audio heard).
        assert_speech(third.samples, third.rate, " ".join(["word"] * max(1, round(third.seconds * 3))))

        # After the barge-in the same socket speaks the next turn.
        fourth = await speak(tts.stream(conn_options=CONN), [TURN_ONE])
        assert_speech(fourth.samples, fourth.rate, TURN_ONE)
        fourth.check_words(TURN_ONE)
        await tts.aclose()

    lines = await socket_log_after_close(caplog)
    opened = [line for line in lines if "multi-stream-input open" in line]
    assert len(opened) == 1, lines
    assert any(line.endswith("closed (1000)") for line in lines), lines
    assert any("closed mid-speech: stopping it" in line for line in lines), lines
    # Every error frame is logged by the connection as "socket <id>: <error code>: <message>".
    errors = [r.getMessage() for r in caplog.records if r.name == "zsynth.speech.ws.connection"]
    assert not [m for m in errors if re.match(r"socket \S+: [a-z_]+: ", m)], errors
