ZSYNTH_URL=${ZSYNTH_URL:-http://127.0.0.1:8000}

# 10-20 s of clean speech of one speaker (WAV, FLAC, Ogg or MP3); cloning needs a full key.
VOICE_ID=$(curl -sS -f -X POST "$ZSYNTH_URL/voices" -H "Authorization: Bearer $ZSYNTH_API_KEY" \
           -F name="Narrator" -F file=@narrator.wav \
           | python3 -c 'import json, sys; print(json.load(sys.stdin)["voice_id"])')    # custom-3kJ9...
curl -sS -f -X POST "$ZSYNTH_URL/v1/text-to-speech/$VOICE_ID?output_format=mp3_44100_128" \
     -H "Authorization: Bearer $ZSYNTH_API_KEY" -H "Content-Type: application/json" \
     -d '{"text": "Hello in the cloned voice."}' -o clone.mp3
curl -sS -f -X DELETE "$ZSYNTH_URL/voices/$VOICE_ID" -H "Authorization: Bearer $ZSYNTH_API_KEY"   # {"status": "ok"}
