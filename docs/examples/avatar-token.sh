ZSYNTH_AVATAR_URL=${ZSYNTH_AVATAR_URL:-http://127.0.0.1:8100}

# On your backend: a session token for one browser (the full key never leaves the backend).
curl -sS -f -X POST "$ZSYNTH_AVATAR_URL/v1/streaming.create_token" \
     -H "X-Api-Key: $ZSYNTH_API_KEY" -H 'Content-Type: application/json' -d '{"ttl_seconds": 300}'
