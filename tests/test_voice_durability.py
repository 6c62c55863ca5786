"""A front killed in the middle of cloning leaves each voice whole or absent, never half-written."""

from __future__ import annotations

import asyncio
import io
import json
import random
import signal

import aiohttp
import pytest
import soundfile as sf

from harness.fronts import front_process
from harness.voice_clips import reference_file

pytestmark = pytest.mark.heavy


async def test_kill_during_clone_leaves_whole_voices_or_none(redis_url, tmp_path):
    data_dir = tmp_path / "data"
    clip = reference_file("wav")
    finished: set[str] = set()
    rng = random.Random(7)
    for trial in range(6):
        with front_process(redis_url, data_dir) as (proc, base):
            async with aiohttp.ClientSession() as session:
                form = aiohttp.FormData()
                form.add_field("name", f"trial-{trial}")
                form.add_field("file", clip, filename="ref.wav", content_type="audio/wav")
                request = asyncio.ensure_future(session.post(f"{base}/voices", data=form))
                if trial == 0:
                    # One clone is let finish before its kill, so the checks below never run on nothing at all.
                    resp = await asyncio.wait_for(request, 30)
                    assert resp.status == 200, await resp.text()
                # Kill at a random moment: before, during or after the write.
                await asyncio.sleep(rng.uniform(0.0, 0.6))
                proc.send_signal(signal.SIGKILL)
                try:
                    resp = await asyncio.wait_for(request, 10)
                    if resp.status == 200:
                        finished.add((await resp.json())["voice_id"])
                except (aiohttp.ClientError, TimeoutError):
                    pass  # the answer was lost with the process; the disk decides
    voices_dir = data_dir / "voices"
    with front_process(redis_url, data_dir) as (_, base):
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/v1/voices") as resp:
                listed = {v["voice_id"] for v in (await resp.json())["voices"] if v["category"] == "cloned"}
    # Every voice the server confirmed survived the kill that followed.
    assert finished and finished <= listed
    on_disk = {p.name for p in voices_dir.iterdir() if p.name.startswith("custom-")}
    assert on_disk == listed
    assert not [p for p in voices_dir.iterdir() if p.name.startswith(".tmp-")], "a half-written voice was left"
    for voice_id in listed:
        meta = json.loads((voices_dir / voice_id / "meta.json").read_text())
        assert meta["name"].startswith("trial-")
        samples, rate = sf.read(io.BytesIO((voices_dir / voice_id / "reference.wav").read_bytes()))
        assert len(samples) / rate > 5.0
