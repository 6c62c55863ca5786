ZSYNTH_URL=${ZSYNTH_URL:-http://127.0.0.1:8000}

curl -sS -f -X POST "$ZSYNTH_URL/v1/audio/speech" \
     -H "Authorization: Bearer $ZSYNTH_API_KEY" -H "Content-Type: application/json" \
     -d '{"model": "tts-1", "voice": "alloy", "input": "The OpenAI dialect, spoken by zsynth.", "response_format": "wav"}' \
     -o openai.wav
