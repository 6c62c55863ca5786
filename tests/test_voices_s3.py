"""The bucket that holds the voice library, against a real S3-compatible server (moto's server mode) on loopback."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import pytest
from redis.asyncio import Redis

from harness.base import free_port, make_settings
from harness.s3 import PREFIX, bucket_keys, create_bucket, start_front
from harness.stores import moto_env
from harness.voice_clips import reference_file
from harness.ws import collect
from zsynth.core import protocol
from zsynth.core.config import Settings
from zsynth.core.voices import is_clone_id
from zsynth.services.keys import VOICE_LIBRARY
from zsynth.speech.app import create_app

from .helpers import status_and_code


async def clone(front, name: str) -> str:
    form = aiohttp.FormData()
    form.add_field("name", name)
    form.add_field("files", reference_file("flac"), filename="ref.flac", content_type="audio/flac")
    resp = await front.post("/voices", data=form)
    assert resp.status == 200, await resp.text()
    return str((await resp.json())["voice_id"])


@pytest.mark.unit
def test_prefix_setting_is_normalised():
    assert Settings.from_env({"ZSYNTH_VOICES_PREFIX": "/a/b"}).voices.prefix == "a/b/"
    assert Settings.from_env({"ZSYNTH_VOICES_PREFIX": ""}).voices.prefix == ""
    assert Settings.from_env({}).voices.prefix == "voices/" and Settings.from_env({}).voices.bucket is None


@pytest.mark.stack
async def test_clone_is_in_the_bucket_before_200_restored_on_an_empty_disk_and_removed_for_good(
    aiohttp_client, aws_endpoint, private_redis_url, tmp_path
):
    bucket = await create_bucket()
    box_a = await start_front(aiohttp_client, private_redis_url, tmp_path / "a", bucket)
    voice_id = await clone(box_a, "mirrored")
    # No waiting: the answer came after the bucket had the voice.
    assert await bucket_keys(bucket) == {f"{PREFIX}{voice_id}/meta.json", f"{PREFIX}{voice_id}/reference.wav"}
    await box_a.close()

    # A box in another region: empty disk, same bucket. It restores the voice at start.
    empty = tmp_path / "b"
    box_b = await start_front(aiohttp_client, private_redis_url, empty, bucket)
    voice = await (await box_b.get(f"/v1/voices/{voice_id}")).json()
    assert voice["name"] == "mirrored" and voice["category"] == "cloned"
    stored = empty / "voices" / voice_id
    original = tmp_path / "a" / "voices" / voice_id / "reference.wav"
    assert (stored / "reference.wav").read_bytes() == original.read_bytes()

    resp = await box_b.delete(f"/v1/voices/{voice_id}")
    assert resp.status == 200
    # The tombstone stays in the bucket for good; the voice's files are gone.
    assert await bucket_keys(bucket) == {f"{PREFIX}{voice_id}/tombstone.json"}
    assert not stored.exists()
    await box_b.close()

    # Box A still has the voice on its disk (it was down): its next start drops it instead of uploading it again.
    assert original.exists()
    box_a = await start_front(aiohttp_client, private_redis_url, tmp_path / "a", bucket)
    assert await status_and_code(await box_a.get(f"/v1/voices/{voice_id}")) == (404, "voice_not_found")
    assert not original.exists()
    assert await bucket_keys(bucket) == {f"{PREFIX}{voice_id}/tombstone.json"}


@pytest.mark.stack
async def test_unreachable_bucket_refuses_changes_with_503_and_keeps_nothing(
    aiohttp_client, aws_endpoint, private_redis_url, tmp_path
):
    missing = f"missing-{uuid.uuid4().hex[:10]}"
    box = await start_front(aiohttp_client, private_redis_url, tmp_path, missing)
    form = aiohttp.FormData()
    form.add_field("name", "nowhere to keep it")
    form.add_field("files", reference_file("flac"), filename="ref.flac", content_type="audio/flac")
    resp = await box.post("/v1/voices/add", data=form)
    assert resp.status == 503 and resp.headers["Retry-After"] == "5"
    assert (await resp.json())["detail"]["status"] == "voice_storage_unavailable"
    assert [v for v in (await (await box.get("/v1/voices")).json())["voices"] if v["category"] == "cloned"] == []
    assert not [p for p in (tmp_path / "voices").iterdir() if p.name.startswith("custom-")]
    redis = Redis.from_url(private_redis_url)
    assert int(await redis.get(protocol.VOICE_MIRROR_FAILURES) or 0) >= 2  # the listing at start, then the upload
    await redis.aclose()
    # Built-in voices still answer.
    assert (await box.get("/v1/voices/joe")).status == 200
    await box.close()


@pytest.mark.stack
async def test_voices_cloned_before_the_bucket_was_set_are_uploaded_at_start(
    aiohttp_client, aws_endpoint, private_redis_url, tmp_path
):
    alone = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
    voice_id = await clone(alone, "from the one-box days")
    await alone.close()
    bucket = await create_bucket()
    box = await start_front(aiohttp_client, private_redis_url, tmp_path, bucket)
    assert f"{PREFIX}{voice_id}/meta.json" in await bucket_keys(bucket)
    library = box.app[VOICE_LIBRARY]
    assert library.catch_up_report is not None and library.catch_up_report.uploaded == 1


@pytest.mark.stack
async def test_a_removal_whose_announcement_was_lost_is_settled_by_the_periodic_comparison(
    aiohttp_client, aws_endpoint, private_redis_url, tmp_path
):
    from zsynth.core.voices.bucket import VoiceBucket

    bucket = await create_bucket()
    box = await start_front(aiohttp_client, private_redis_url, tmp_path, bucket, voices_resync_s=0.3)
    voice_id = await clone(box, "removed behind the box's back")
    # Another box removed it, and Redis never took the announcement: only the bucket knows.
    remote = VoiceBucket(bucket, PREFIX)
    await remote.open()
    await remote.remove_voice(voice_id)
    await remote.close()
    deadline = asyncio.get_running_loop().time() + 5.0
    while (await box.get(f"/v1/voices/{voice_id}")).status != 404:
        assert asyncio.get_running_loop().time() < deadline, "the periodic comparison did not drop the voice"
        await asyncio.sleep(0.1)
    assert await status_and_code(await box.get(f"/v1/voices/{voice_id}")) == (404, "voice_not_found")
    assert not (tmp_path / "voices" / voice_id).exists()


@pytest.mark.stack
async def test_an_unauthenticated_socket_never_makes_the_front_fetch_a_voice(
    aiohttp_client, aws_endpoint, private_redis_url, tmp_path
):
    """A realtime upgrade authenticates in band, so the routes let it through with no key. Naming a cloned voice this
    box lacks must not make the front read the bucket before the caller is known: the socket gets the same in-band
    refusal as for any other voice id, and the library has not looked for the voice. With the key, it does look."""
    key = "s3-socket-key"
    bucket = await create_bucket()
    front = await start_front(aiohttp_client, private_redis_url, tmp_path, bucket, auth_api_keys=(key,))
    library = front.app[VOICE_LIBRARY]
    missing = "custom-" + "N0tInTheBucket00"
    assert is_clone_id(missing)

    async def refusal(voice_id: str) -> list[dict[str, object]]:
        ws = await front.ws_connect(f"/v1/text-to-speech/{voice_id}/stream-input?output_format=pcm_16000")
        await ws.send_json({"text": " "})  # no xi_api_key: refused in band
        got = await collect(ws, timeout=20)
        assert got.close_code == 1008, got.frames
        return got.errors

    assert await refusal(missing) == await refusal("no-such-voice")
    assert missing not in library.missing and len(library.missing) == 0, "the bucket was read for a stranger"

    # The same socket with the key: the voice is looked for (and is not there), after authentication.
    ws = await front.ws_connect(
        f"/v1/text-to-speech/{missing}/stream-input?output_format=pcm_16000", headers={"xi-api-key": key}
    )
    await ws.send_json({"text": " "})
    await ws.send_json({"text": "Hello there.", "flush": True})
    got = await collect(ws, timeout=20)
    assert [(e["error"], e["code"]) for e in got.errors] == [("voice_not_found", 1008)], got.frames
    assert missing in library.missing


@pytest.mark.stack
async def test_a_bucket_that_is_down_is_named_in_the_log_never_in_an_answer(
    aiohttp_client, private_redis_url, tmp_path, monkeypatch, caplog
):
    """Issue 36 F8: with S3 down, the 503 bodies showed the internal endpoint, the bucket and object keys (the
    storage's own error text). Now the answers say what failed and the log says where."""
    endpoint = f"http://127.0.0.1:{free_port()}"  # nobody listens: S3 is down
    for name, value in moto_env(endpoint).items():
        monkeypatch.setenv(name, value)
    bucket = f"internal-bucket-{uuid.uuid4().hex[:8]}"
    settings = make_settings(
        private_redis_url,
        tmp_path,
        voices_bucket=bucket,
        voices_prefix="internal-voices/",
        voices_dictionaries_prefix="internal-dictionaries/",
        voices_start_wait_s=1.0,
    )
    front = await aiohttp_client(create_app(settings))
    form = aiohttp.FormData()
    form.add_field("name", "nowhere to keep it")
    form.add_field("files", reference_file("flac"), filename="ref.flac", content_type="audio/flac")
    rules = [{"type": "alias", "string_to_replace": "zsynth", "alias": "zee synth"}]
    answers = [
        await front.post("/v1/voices/add", data=form),
        await front.post("/v1/text-to-speech/custom-abcdefgh12345678", json={"text": "A voice this box lacks."}),
        await front.post("/v1/pronunciation-dictionaries/add-from-rules", json={"name": "lexicon", "rules": rules}),
    ]
    codes = []
    for resp in answers:
        body = await resp.text()
        assert resp.status == 503, body
        codes.append((await resp.json())["detail"]["status"])
        for internal in (endpoint.split("//")[1], bucket, "internal-voices", "internal-dictionaries", "endpoint"):
            assert internal not in body, f"{internal!r} in the answer {body}"
    assert codes == ["voice_storage_unavailable", "voice_storage_unavailable", "dictionary_storage_unavailable"]
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert endpoint.split("//")[1] in logged and bucket in logged  # the operator still learns where
