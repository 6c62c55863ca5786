"""Issue 21 (part): decode bombs, paths from the bucket, silent AWS endpoints, crashed background tasks, avatar
capacity and cross-site requests. Each test measures what the item is about where it is about memory or time."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from .helpers import front_process
from .voice_clips import flac_bomb

TIMEOUT = aiohttp.ClientTimeout(total=60)


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


# ----- item 2: decode bombs ----------------------------------------------------------------------------------------


async def test_a_20_mib_flac_bomb_is_refused_from_its_header_with_bounded_memory(redis_url, tmp_path):
    """8 channels of silence at 192 kHz, 20 MiB of FLAC: about 80 GiB decoded. The front refuses it from its header;
    its RSS grows by little more than the upload itself (printed: the figure quoted in docs/limits.md)."""
    bomb = flac_bomb(20 * 1024 * 1024 - 4096)
    with front_process(redis_url, tmp_path) as (proc, base):
        form = aiohttp.FormData()
        form.add_field("name", "bomb")
        form.add_field("files", bomb, filename="bomb.flac", content_type="audio/flac")
        before = _status_kib(proc.pid, "VmRSS")
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http, http.post(f"{base}/v1/voices/add", data=form) as r:
            body = await r.json()
            assert r.status == 400, body
        peak = _status_kib(proc.pid, "VmHWM")
        assert body["detail"]["code"] == "audio_too_long", body
        assert "60 s" in body["detail"]["message"]
        growth_mib = (peak - before) / 1024
        print(f"RSS growth for a 20 MiB FLAC bomb: {growth_mib:.1f} MiB (RSS before {before / 1024:.0f} MiB)")
        assert growth_mib < 120, growth_mib
