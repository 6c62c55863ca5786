"""Rewrite wheels in place without their dependency list (the ``Requires-Dist`` lines of their METADATA).

scripts/install-gpu installs chatterbox-tts and s3tokenizer this way: their pins (torch 2.6, numpy<2, gradio, pre-commit
and more) fight the stack zsynth runs on, and what Turbo really imports is listed in scripts/turbo-requirements.txt.
A wheel with its pins left in would make every later pip run report them as broken dependencies.

Usage: python scripts/unpin_wheel.py WHEEL...
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path


def record_hash(data: bytes) -> str:
    """The ``sha256=...`` form a wheel's RECORD uses (urlsafe base64, no padding)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def without_requirements(metadata: bytes) -> bytes:
    """METADATA with every ``Requires-Dist`` header line dropped; the body (after the blank line) kept as it is."""
    head, sep, body = metadata.partition(b"\n\n")
    kept = [line for line in head.split(b"\n") if not line.startswith(b"Requires-Dist:")]
    return b"\n".join(kept) + sep + body


def unpin(wheel: Path) -> None:
    """Replace ``wheel`` with the same wheel whose METADATA lists no dependencies (RECORD updated to match)."""
    with zipfile.ZipFile(wheel) as source:
        entries = [(info, source.read(info)) for info in source.infolist()]
    names = [info.filename for info, _ in entries]
    metadata_name = next(n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
    record_name = metadata_name.removesuffix("METADATA") + "RECORD"
    metadata = without_requirements(dict((i.filename, d) for i, d in entries)[metadata_name])
    rewritten = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as target:
        for info, data in entries:
            if info.filename == metadata_name:
                data = metadata
            elif info.filename == record_name:
                data = rewrite_record(data, metadata_name, metadata)
            target.writestr(info, data)
    rewritten.replace(wheel)


def rewrite_record(record: bytes, metadata_name: str, metadata: bytes) -> bytes:
    """RECORD with METADATA's line carrying the new hash and size."""
    lines = record.decode().splitlines()
    fresh = f"{metadata_name},{record_hash(metadata)},{len(metadata)}"
    return ("\n".join(fresh if line.split(",")[0] == metadata_name else line for line in lines) + "\n").encode()


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for name in argv:
        unpin(Path(name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
