ZSYNTH_URL=${ZSYNTH_URL:-http://127.0.0.1:8000}

# Make a dictionary (one alias rule), then delete it and every version of it.
ID=$(curl -sS -f -X POST "$ZSYNTH_URL/v1/pronunciation-dictionaries/add-from-rules" \
     -H "xi-api-key: $ZSYNTH_API_KEY" -H "Content-Type: application/json" \
     -d '{"name": "Short-lived", "rules": [{"type": "alias", "string_to_replace": "zs", "alias": "zee ess"}]}' \
     | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
curl -sS -f -X DELETE "$ZSYNTH_URL/v1/pronunciation-dictionaries/$ID" -H "xi-api-key: $ZSYNTH_API_KEY"
echo
# It is gone: 404 pronunciation_dictionary_not_found.
curl -sS -o /dev/null -w '%{http_code}\n' "$ZSYNTH_URL/v1/pronunciation-dictionaries/$ID" -H "xi-api-key: $ZSYNTH_API_KEY"
