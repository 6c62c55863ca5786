"""The official OpenAI SDK, pointed at zsynth: base_url ends in /v1, the key is a zsynth key or token."""

import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("ZSYNTH_URL", "http://127.0.0.1:8000") + "/v1",
    api_key=os.environ.get("ZSYNTH_API_KEY") or "unused-when-open",
)

# The whole file at once ...
speech = client.audio.speech.create(model="tts-1", voice="alloy", input="Hello from the OpenAI SDK.")
speech.write_to_file("openai.mp3")

# ... or streamed to disk as it is made.
with client.audio.speech.with_streaming_response.create(
    model="gpt-4o-mini-tts", voice="alloy", input="Streamed, chunk by chunk.", response_format="opus"
) as response:
    response.stream_to_file("openai-streamed.ogg")
