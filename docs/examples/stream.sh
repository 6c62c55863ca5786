ZSYNTH_URL=${ZSYNTH_URL:-http://127.0.0.1:8000}

# Raw 22.05 kHz 16-bit mono, written as it arrives; pipe it to `aplay -f S16_LE -r 22050 -c 1` to hear it live.
curl -sS -f -N -X POST "$ZSYNTH_URL/v1/text-to-speech/any-voice/stream?output_format=pcm_22050" \
     -H "Authorization: Bearer $ZSYNTH_API_KEY" -H "Content-Type: application/json" \
     -d '{"text": "Streamed speech arrives sentence by sentence."}' \
     -o streamed.pcm
