"""The official ElevenLabs SDK, pointed at zsynth: only base_url changes."""

import os

from elevenlabs.client import ElevenLabs

client = ElevenLabs(
    base_url=os.environ.get("ZSYNTH_URL", "http://127.0.0.1:8000"),
    api_key=os.environ.get("ZSYNTH_API_KEY") or "unused-when-open",
)
audio = b"".join(client.text_to_speech.convert(voice_id="any-voice", text="Hello there."))
with open("hello-sdk.mp3", "wb") as out:
    out.write(audio)
