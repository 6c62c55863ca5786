"""Mint an ephemeral zsk_temp_ token from a full key and print the server's JSON.

The full key is read from the environment (ZSYNTH_API_KEY), never from the command line, where other users of
the machine could read it in the process list. Exit status 0 on success; on failure the server's message goes to
stderr and the status is 1 (2 for usage errors).

    ZSYNTH_API_KEY=zsk_live_... scripts/mint-token [--ttl 300] [BASE_URL]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    """Parse arguments, call POST /v1/tokens/ephemeral, print the answer."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base_url", nargs="?", default=os.environ.get("ZSYNTH_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--ttl", type=int, help="token lifetime in seconds (the server clamps it to 30-600)")
    args = parser.parse_args()
    key = os.environ.get("ZSYNTH_API_KEY", "").strip()
    if not key:
        print("mint-token: set ZSYNTH_API_KEY to a full API key", file=sys.stderr)
        return 2
    body = {} if args.ttl is None else {"ttl_seconds": args.ttl}
    request = urllib.request.Request(
        args.base_url.rstrip("/") + "/v1/tokens/ephemeral",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            print(resp.read().decode())
            return 0
    except urllib.error.HTTPError as err:
        raw = err.read().decode(errors="replace")
        try:
            detail = json.loads(raw)["detail"]
            message = f"{detail['status']}: {detail['message']}"
        except (ValueError, KeyError, TypeError):
            message = raw.strip() or err.reason
        print(f"mint-token: HTTP {err.code}: {message}", file=sys.stderr)
    except (urllib.error.URLError, OSError) as err:
        print(f"mint-token: cannot reach {args.base_url}: {err}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
