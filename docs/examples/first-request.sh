# The server's address and key: set them once in your shell (an open dev box takes any key).
ZSYNTH_URL=${ZSYNTH_URL:-http://127.0.0.1:8000}
ZSYNTH_API_KEY=${ZSYNTH_API_KEY:-any-key-on-an-open-box}

curl -sS -f -X POST "$ZSYNTH_URL/v1/text-to-speech/any-voice?output_format=mp3_44100_128" \
     -H "Authorization: Bearer $ZSYNTH_API_KEY" -H "Content-Type: application/json" \
     -d '{"text": "Hello from zsynth. This speech was made on your own machine."}' \
     -o hello.mp3
