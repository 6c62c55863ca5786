"""Stream raw 24 kHz PCM with plain HTTP (requests): a voice id, a seed and a stability setting."""

import os

import requests

base = os.environ.get("ZSYNTH_URL", "http://127.0.0.1:8000")
# A cloned id ("custom-...") from GET /v1/voices, or any other name: names that are neither a built-in nor a clone
# are spoken by the swap-out voice (a clone id the library lacks gets 404 voice_not_found).
voice_id = os.environ.get("VOICE_ID", "my-narrator")
with requests.post(
    f"{base}/v1/text-to-speech/{voice_id}/stream?output_format=pcm_24000",
    headers={"Authorization": f"Bearer {os.environ.get('ZSYNTH_API_KEY', '')}"},
    json={"text": "Hi! This is my cloned voice.", "voice_settings": {"stability": 0.6}, "seed": 7},
    stream=True,
    timeout=60,
) as resp:
    resp.raise_for_status()
    audio = b"".join(resp.iter_content(4800))
print(f"{len(audio) / 48000:.1f} s of audio")
