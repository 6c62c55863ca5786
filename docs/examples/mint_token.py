"""Your backend mints a speech token for a signed-in user; the page receives only the token."""

import os

import requests

base = os.environ.get("ZSYNTH_URL", "http://127.0.0.1:8000")
full_key = os.environ["ZSYNTH_API_KEY"]

token = requests.post(
    f"{base}/v1/tokens/ephemeral", headers={"xi-api-key": full_key}, json={"ttl_seconds": 300}, timeout=10
).json()["token"]
print(token)
