ZSYNTH_URL=${ZSYNTH_URL:-http://127.0.0.1:8000}

# Every path the speech API documents, one a line (the document needs no key).
curl -sS -f "$ZSYNTH_URL/openapi.json" | python3 -c 'import json, sys; print("\n".join(json.load(sys.stdin)["paths"]))'
