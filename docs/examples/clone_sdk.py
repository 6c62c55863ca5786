"""Clone a voice with the ElevenLabs SDK, speak with it, remove it (cloning needs a full key)."""

import os

from elevenlabs.client import ElevenLabs

client = ElevenLabs(
    base_url=os.environ.get("ZSYNTH_URL", "http://127.0.0.1:8000"),
    api_key=os.environ.get("ZSYNTH_API_KEY") or "unused-when-open",
)
with open("narrator.wav", "rb") as fh:
    voice = client.voices.ivc.create(name="Narrator", files=[("narrator.wav", fh.read(), "audio/wav")])
audio = b"".join(client.text_to_speech.convert(voice_id=voice.voice_id, text="Hello."))
client.voices.delete(voice.voice_id)
