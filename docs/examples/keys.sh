# The keys table named here, reached with the AWS_* variables of your account (or AWS_ENDPOINT_URL).
export ZSYNTH_API_KEYS_TABLE=${ZSYNTH_API_KEYS_TABLE:-zsynth-keys}

zsynth keys create --name my-backend > new-key.txt     # prints "id: 3f2a…" and "key: zsk_live_…" once
KEY_ID=$(awk '/^id:/ {print $2}' new-key.txt)
zsynth keys list --all                                  # ids, kinds, dates, names; --all adds tokens
zsynth keys revoke "$KEY_ID"                            # the key and every token it minted, within the cache time
