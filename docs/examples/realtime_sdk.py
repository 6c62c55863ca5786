"""The ElevenLabs SDK's realtime helper: text goes in as it is written, audio comes back as it is made."""

import os

from elevenlabs.client import ElevenLabs

base_url = os.environ.get("ZSYNTH_URL", "http://127.0.0.1:8000")
client = ElevenLabs(base_url=base_url, api_key=os.environ.get("ZSYNTH_API_KEY") or "unused-when-open")
if base_url.startswith("http://"):
    # The helper always opens wss:// (it swaps the scheme of base_url). A plain-HTTP server, such as a dev box on
    # loopback, speaks ws://, and the SDK has no public setting for it, so set its private attribute. With TLS on
    # (https:// base URL) none of this is needed.
    client.text_to_speech._ws_base_url = "ws://" + base_url.removeprefix("http://")

words = iter(["Hello there. ", "This was streamed ", "word by word."])
with open("realtime.mp3", "wb") as out:
    for audio in client.text_to_speech.convert_realtime(voice_id="any-voice", text=words):
        out.write(audio)
