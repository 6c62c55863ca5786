"""Issue 26, items 5 and 6: clips from the bucket and on a worker's disk pass the upload checks (size, then channels,
rate and length from the header) before anything decodes them, a meta.json may name only an audio clip as its
reference, and a cloning request's clips are refused from their summed header lengths before any is decoded.

The FLAC bomb is 0.28 MB of 8-channel silence at 192 kHz whose header claims over three minutes (about 1.2 GB once
decoded to float32); on main, one named in the bucket took a worker's RSS up by 2.7 GB.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import aioboto3
import aiohttp
import numpy as np
import pytest
import soundfile as sf
from redis.asyncio import Redis

from harness.audio import assert_speech, decode_audio
from harness.base import make_settings
from harness.fronts import front_process
from harness.s3 import PREFIX, create_bucket
from harness.voice_clips import flac_bomb, reference_file
from harness.workers import WorkerProcess
from zsynth.core import protocol
from zsynth.core.voices import VoiceStore
from zsynth.core.voices.bucket import ObjectTooLarge, VoiceBucket, VoiceRefused
from zsynth.core.voices.clips import ClipError, check_total, clip_header, decode_clips
from zsynth.core.voices.store import check_reference
from zsynth.services.dispatch import Dispatcher, JobFailed

TIMEOUT = aiohttp.ClientTimeout(total=60)
TEXT = "A voice from the library, checked before it is read."
BOMB_BYTES = 280_000  # the 0.28 MB
RSS_GROWTH_MB = 50


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def _reset_peak(pid: int) -> None:
    """VmHWM back to the current RSS, so the next VmHWM is the peak of what follows."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _long_clip(seconds: int = 59, channels: int = 8, rate: int = 192000) -> bytes:
    """``seconds`` of 8-channel silence at 192 kHz as FLAC (about 90 kB for 59 s): every sample is decoded."""
    out = io.BytesIO()
    block = np.zeros((rate, channels), dtype=np.int16)
    with sf.SoundFile(out, "w", samplerate=rate, channels=channels, format="FLAC", subtype="PCM_16") as fh:
        for _ in range(seconds):
            fh.write(block)
    return out.getvalue()


def _meta(voice_id: str, reference: str) -> dict[str, Any]:
    return {"format": 1, "voice_id": voice_id, "name": "from the bucket", "revision": 0, "reference": reference}


async def _put_voice(s3: Any, bucket: str, voice_id: str, reference: str, data: bytes) -> None:
    """A voice as another box (or anyone with the bucket's credentials) would have written it."""
    await s3.put_object(Bucket=bucket, Key=f"{PREFIX}{voice_id}/{reference}", Body=data)
    body = json.dumps(_meta(voice_id, reference)).encode()
    await s3.put_object(Bucket=bucket, Key=f"{PREFIX}{voice_id}/meta.json", Body=body)


def _new_id(tag: str) -> str:
    return f"custom-{tag}{uuid.uuid4().hex[:10]}"


# ----- unit checks ---------------------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("name", ["meta.json", "tombstone.json", "notes.txt", "reference", "reference.wav.json"])
def test_a_meta_json_may_not_name_itself_or_a_file_that_is_not_audio(name, tmp_path):
    with pytest.raises(ValueError, match="not an audio clip"):
        check_reference({"reference": name}, "custom-abcdabcd")
    voice_dir = tmp_path / "custom-abcdabcd"
    voice_dir.mkdir()
    (voice_dir / "meta.json").write_text(json.dumps(_meta(voice_dir.name, name)))
    store = VoiceStore(tmp_path)
    assert store.get(voice_dir.name) is None and store.all() == {}


@pytest.mark.unit
@pytest.mark.parametrize("name", ["reference.wav", "reference-3.wav", "clip.FLAC", "a.ogg", "b.mp3"])
def test_audio_references_are_accepted(name):
    check_reference({"reference": name}, "custom-abcdabcd")


@pytest.mark.unit
def test_a_flac_bomb_is_refused_from_its_header_alone():
    bomb = flac_bomb(BOMB_BYTES)
    started = time.process_time()
    with pytest.raises(ClipError) as refused:
        clip_header(bomb, "bomb.flac")
    assert time.process_time() - started < 0.05
    assert refused.value.code == "audio_too_long" and "60 s" in refused.value.message


@pytest.mark.unit
def test_clip_lengths_are_summed_from_headers_before_any_decoding():
    clip = _long_clip()
    header = clip_header(clip, "clip.flac")
    assert (header.channels, header.rate) == (8, 192000) and abs(header.seconds - 59.0) < 0.01
    started = time.process_time()
    with pytest.raises(ClipError) as refused:
        decode_clips([(f"clip{n}.flac", clip) for n in range(10)], 20 * 1024 * 1024)
    assert time.process_time() - started < 0.2
    assert refused.value.code == "audio_too_long" and "in total" in refused.value.message
    check_total([header])  # one 59 s clip is fine


# ----- a real front: ten 59 s clips ----------------------------------------------------------------------------------


@pytest.mark.heavy
async def test_ten_59_s_eight_channel_clips_are_refused_by_a_front_after_reading_headers_only(redis_url, tmp_path):
    """Ten clips of 59 s, 8 channels at 192 kHz (0.92 MB in all): 400 for "over 60 s in total", and the front spent
    at most 0.2 s of CPU on the request (on main: 7-10 s, every clip decoded first)."""
    clip = _long_clip()
    form = aiohttp.FormData()
    form.add_field("name", "ten long clips")
    for n in range(10):
        form.add_field("files", clip, filename=f"clip{n}.flac", content_type="audio/flac")
    with front_process(redis_url, tmp_path) as (proc, base):
        before = _cpu_seconds(proc.pid)
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http, http.post(f"{base}/v1/voices/add", data=form) as r:
            body = await r.json()
            status = r.status
        spent = _cpu_seconds(proc.pid) - before
    print(f"front CPU before refusing ten 59 s 8-channel clips: {spent:.3f} s")
    assert status == 400, body
    assert body["detail"]["code"] == "audio_too_long" and "in total" in body["detail"]["message"], body
    assert spent <= 0.2, spent


# ----- the bucket: capped reads --------------------------------------------------------------------------------------


@pytest.mark.stack
async def test_bucket_objects_over_their_cap_are_refused_without_being_read(aws_endpoint):
    bucket_name = await create_bucket()
    bucket = VoiceBucket(bucket_name, PREFIX, clip_max_bytes=50_000)
    await bucket.open()
    try:
        async with aioboto3.Session().client("s3") as s3:
            big, huge_meta, self_named = _new_id("big"), _new_id("meta"), _new_id("self")
            await _put_voice(s3, bucket_name, big, "reference.wav", reference_file("wav"))  # about 0.5 MB
            await s3.put_object(
                Bucket=bucket_name,
                Key=f"{PREFIX}{huge_meta}/meta.json",
                Body=json.dumps({**_meta(huge_meta, "reference.wav"), "pad": "x" * 2_000_000}).encode(),
            )
            await _put_voice(s3, bucket_name, self_named, "meta.json", b"{}")
        with pytest.raises(ObjectTooLarge, match="over the limit of 50000"):
            await bucket.get_voice(big)
        with pytest.raises(ObjectTooLarge):
            await bucket.get_meta(huge_meta)
        with pytest.raises(VoiceRefused, match="not an audio clip"):
            await bucket.get_voice(self_named)
    finally:
        await bucket.close()


# ----- a real front and a real worker: a FLAC bomb named in the bucket -----------------------------------------------


async def _job(redis_url: str, tmp_path: Path, voice_id: str) -> JobFailed | None:
    """One job straight to the queue (no front in between); its failure, or None when it was spoken."""
    redis = Redis.from_url(redis_url)
    dispatcher = Dispatcher(make_settings(redis_url, tmp_path), redis)
    await dispatcher.start()
    try:
        async with await dispatcher.submit(protocol.Job(TEXT, voice_id, "pcm_22050")) as stream:
            try:
                async for _ in stream.chunks():
                    pass
            except JobFailed as err:
                return err
        return None
    finally:
        await dispatcher.close()
        await redis.aclose()


async def _speak(base: str, voice_id: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as http,
        http.post(f"{base}/v1/text-to-speech/{voice_id}?output_format=pcm_22050", json={"text": TEXT}) as resp,
    ):
        if resp.status != 200:
            return resp.status, await resp.json()
        return 200, await resp.read()


@pytest.mark.heavy
async def test_a_flac_bomb_named_in_the_bucket_is_refused_from_its_header_by_front_and_worker(
    aws_endpoint, private_redis_url, tmp_path
):
    """A 0.28 MB FLAC bomb as a bucket voice's reference: the front answers 404 at once, a job sent straight to the
    queue fails with voice_not_found (the worker fetched it itself), one planted on the worker's disk is refused too,
    and the worker stays up with its RSS grown by at most 50 MB (on main: +2.7 GB, and the request timed out)."""
    bucket = await create_bucket()
    bomb = flac_bomb(BOMB_BYTES)
    assert len(bomb) <= BOMB_BYTES
    via_front, via_queue, self_named, on_disk = (_new_id(tag) for tag in ("front", "queue", "self", "disk"))
    async with aioboto3.Session().client("s3") as s3:
        await _put_voice(s3, bucket, via_front, "reference.flac", bomb)
        await _put_voice(s3, bucket, via_queue, "bomb.flac", bomb)
        await _put_voice(s3, bucket, self_named, "meta.json", b"{}")
    env = {"ZSYNTH_VOICES_BUCKET": bucket, "ZSYNTH_VOICES_PREFIX": PREFIX}
    worker_data = tmp_path / "worker"
    planted = worker_data / "voices" / on_disk
    planted.mkdir(parents=True)
    (planted / "reference.flac").write_bytes(bomb)
    (planted / "meta.json").write_text(json.dumps(_meta(on_disk, "reference.flac")))
    worker = WorkerProcess(private_redis_url, f"bomb-{uuid.uuid4().hex[:6]}", worker_data, **env)
    try:
        with front_process(private_redis_url, tmp_path / "front", **env) as (_, base):
            worker.wait_ready()
            before = _status_kib(worker.proc.pid, "VmRSS")
            _reset_peak(worker.proc.pid)
            started = time.monotonic()
            for voice_id in (via_front, self_named):
                status, body = await _speak(base, voice_id)
                assert status == 404 and body["detail"]["code"] == "voice_not_found", body
                assert "refused" in body["detail"]["message"] or "not an audio clip" in body["detail"]["message"]
            for voice_id in (via_queue, on_disk):
                failure = await asyncio.wait_for(_job(private_redis_url, tmp_path, voice_id), 60)
                assert failure is not None and failure.code == "voice_not_found", failure
                assert "refused" in failure.message and "60 s" in failure.message, failure.message
            elapsed = time.monotonic() - started
            growth_mb = (_status_kib(worker.proc.pid, "VmHWM") - before) / 1024
            print(f"worker RSS growth for a {len(bomb) / 1e6:.2f} MB FLAC bomb in the bucket: {growth_mb:+.1f} MB")
            assert worker.proc.poll() is None, "the worker died"
            assert growth_mb <= RSS_GROWTH_MB, growth_mb
            assert elapsed < 30, elapsed
            # The worker still speaks, and nothing of the refused voices was written to either disk.
            status, audio = await _speak(base, "joe")
            assert status == 200, audio
            pcm, rate = decode_audio(audio, "pcm_22050")
            assert_speech(pcm, rate, TEXT)
            for data in (tmp_path / "front", worker_data):
                for voice_id in (via_front, via_queue, self_named):
                    assert not (data / "voices" / voice_id).exists(), (data, voice_id)
    finally:
        worker.stop()


@pytest.mark.unit
def test_piper_measures_a_reference_only_after_its_header_passes(tmp_path):
    """The engine's own pitch measurement refuses the bomb from its header (speaking unshifted) with bounded
    memory, and still measures an ordinary reference."""
    from workers.engines.base import VoiceSpec
    from workers.engines.piper import PiperEngine

    engine = PiperEngine(threads=1)
    bombed = tmp_path / "custom-bombdisk01"
    bombed.mkdir()
    (bombed / "reference.flac").write_bytes(flac_bomb(BOMB_BYTES))
    meta = _meta(bombed.name, "reference.flac")
    pid = os.getpid()
    before = _status_kib(pid, "VmRSS")
    _reset_peak(pid)
    assert engine.reference_f0(VoiceSpec(bombed.name, str(bombed), meta)) is None
    assert (_status_kib(pid, "VmHWM") - before) / 1024 <= RSS_GROWTH_MB
    fine = tmp_path / "custom-finedisk01"
    fine.mkdir()
    (fine / "reference.wav").write_bytes(reference_file("wav"))
    value = engine.reference_f0(VoiceSpec(fine.name, str(fine), _meta(fine.name, "reference.wav")))
    assert value is not None and 80 < value < 400, value
