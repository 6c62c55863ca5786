ZSYNTH_URL=${ZSYNTH_URL:-http://127.0.0.1:8000}

# Prints the characters the alignment spells, in order: "Hello there."
curl -sS -f -X POST "$ZSYNTH_URL/v1/text-to-speech/any-voice/with-timestamps?output_format=mp3_44100_128" \
     -H "Authorization: Bearer $ZSYNTH_API_KEY" -H "Content-Type: application/json" \
     -d '{"text": "Hello there."}' \
  | python3 -c 'import json, sys; print("".join(json.load(sys.stdin)["alignment"]["characters"]))'
