ZSYNTH_URL=${ZSYNTH_URL:-http://127.0.0.1:8000}

# Your backend mints a short-lived token with the full key ...
TOKEN=$(curl -sS -f -X POST "$ZSYNTH_URL/v1/tokens/ephemeral" \
        -H "Authorization: Bearer $ZSYNTH_API_KEY" -H "Content-Type: application/json" -d '{"ttl_seconds": 120}' \
        | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')
# ... and the page speaks with the token alone.
curl -sS -f -X POST "$ZSYNTH_URL/v1/text-to-speech/any-voice" -H "Authorization: Bearer $TOKEN" \
     -H "Content-Type: application/json" -d '{"text": "Spoken with a token."}' -o token.mp3
