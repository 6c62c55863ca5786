"""What a request body, a path or a made-up id may cost: JSON bodies have their own small limit, unknown voice
settings never reach Redis, client strings cannot forge log lines, unknown clone ids are remembered as missing for a
while in a bounded list, and echoed model ids are bounded.

Against the real app factory (in process) or a real ``zsynth serve``, the real Redis, the shared Piper workers and
moto's S3; each test failed before its mend (see the docstrings).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import aiohttp
import pytest
from redis.asyncio import Redis
from yarl import URL

from harness.audio import assert_speech, decode_audio
from harness.base import ROOT, free_port, make_settings, wait_for
from harness.s3 import PREFIX, create_bucket, start_front
from harness.voice_clips import reference_file
from zsynth.avatar.app import create_avatar_app
from zsynth.core import protocol
from zsynth.core.config import Settings
from zsynth.core.logs import one_line, quoted
from zsynth.core.voice_settings import check_voice_settings
from zsynth.core.voices import is_clone_id
from zsynth.core.voices.bucket import VoiceBucket
from zsynth.core.voices.library import MissingIds
from zsynth.services.keys import VOICE_LIBRARY
from zsynth.services.voices import new_clone_meta
from zsynth.speech.app import create_app

TIMEOUT = aiohttp.ClientTimeout(total=60)
JSON_HEADERS = {"Content-Type": "application/json"}
JSON_LIMIT = 256 * 1024  # ZSYNTH_MAX_JSON_BODY_BYTES' default


def junk_settings_body(junk_bytes: int, **fields: object) -> bytes:
    """A synthesis body whose voice_settings carry one known field and one unknown field of ``junk_bytes``."""
    return json.dumps(
        {"text": "Hi.", "voice_settings": {"stability": 0.5, "junk": "x" * junk_bytes}, **fields}
    ).encode()


def padded(body: dict[str, object], size: int) -> bytes:
    """``body`` with an unknown top-level field that brings it to about ``size`` bytes."""
    return json.dumps({**body, "pad": "p" * size}).encode()


# ----- JSON bodies: their own limit ----------------------------------------------------------------------------------


@pytest.mark.stack
async def test_a_20_mb_unknown_settings_field_gets_413_unread(client):
    """Before: read, parsed on the loop and queued whole (ZSYNTH_MAX_BODY_BYTES, 25 MiB, was every body's limit)."""
    resp = await client.post(
        "/v1/text-to-speech/joe/stream", data=junk_settings_body(20_000_000), headers=JSON_HEADERS, timeout=TIMEOUT
    )
    assert resp.status == 413, (await resp.read())[:300]
    detail = (await resp.json())["detail"]
    assert detail["code"] == "request_too_large" and str(JSON_LIMIT) in detail["message"]

    async def chunked():  # no Content-Length to refuse up front: reading stops at the limit
        body = junk_settings_body(2_000_000)
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    resp = await client.post("/v1/text-to-speech/joe", data=chunked(), headers=JSON_HEADERS, timeout=TIMEOUT)
    assert resp.status == 413, await resp.text()
    assert (await resp.json())["detail"]["code"] == "request_too_large"


@pytest.mark.stack
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/text-to-speech/joe", {"text": "Hi."}),
        ("/v1/text-to-speech/joe/stream/with-timestamps", {"text": "Hi."}),
        ("/v1/tokens/ephemeral", {}),
        ("/v1/pronunciation-dictionaries/add-from-rules", {"name": "x", "rules": []}),
        ("/v1/voices/joe/settings/edit", {"stability": 0.5}),
    ],
)
async def test_300_kib_of_json_gets_413_on_the_elevenlabs_routes(client, path, body):
    """Before: under the 25 MiB limit, so read and parsed (answered 200, or the route's own refusal)."""
    resp = await client.post(path, data=padded(body, 300 * 1024), headers=JSON_HEADERS, timeout=TIMEOUT)
    assert resp.status == 413, await resp.text()
    assert (await resp.json())["detail"]["code"] == "request_too_large"


@pytest.mark.stack
async def test_300_kib_of_json_gets_413_in_openais_envelope(client):
    body = padded({"model": "tts-1", "voice": "joe", "input": "Hi."}, 300 * 1024)
    resp = await client.post("/v1/audio/speech", data=body, headers=JSON_HEADERS, timeout=TIMEOUT)
    assert resp.status == 413, await resp.text()
    error = (await resp.json())["error"]
    assert error["code"] == "request_too_large" and error["type"] == "invalid_request_error"


@pytest.mark.stack
async def test_300_kib_of_json_gets_413_on_the_avatar_server(aiohttp_client, settings):
    """Before: the avatar server read up to 1 MiB and parsed it."""
    avatar = await aiohttp_client(create_avatar_app(settings))
    resp = await avatar.post("/connect", data=padded({"sdp": "v=0", "type": "offer"}, 300 * 1024), headers=JSON_HEADERS)
    assert resp.status == 413, await resp.text()
    assert (await resp.json())["code"] == "request_too_large"


@pytest.mark.stack
async def test_the_json_limit_is_a_setting_and_a_body_under_it_is_spoken(aiohttp_client, redis_url, data_dir, client):
    small = await aiohttp_client(create_app(make_settings(redis_url, data_dir, limits_max_json_body_bytes=1024)))
    resp = await small.post("/v1/text-to-speech/joe", data=padded({"text": "Hi."}, 2048), headers=JSON_HEADERS)
    assert resp.status == 413, await resp.text()
    # The default limit takes a 200 KiB body: its unknown fields are dropped and the text is spoken.
    resp = await client.post("/v1/text-to-speech/joe", data=junk_settings_body(200 * 1024), headers=JSON_HEADERS)
    assert resp.status == 200, await resp.text()
    assert_speech(*decode_audio(await resp.read(), "mp3_44100_128"), "Hi.")


# ----- unknown voice settings never reach Redis ----------------------------------------------------------------------


@pytest.mark.unit
def test_unknown_voice_settings_fields_are_dropped_known_ones_kept():
    """Before: every field passed through to the job as it came."""
    sent = {"stability": 0.3, "speed": None, "use_speaker_boost": True, "junk": "x" * 1000, "nested": {"a": [1]}}
    assert check_voice_settings(sent) == {"stability": 0.3, "speed": None, "use_speaker_boost": True}


@pytest.mark.stack
async def test_ten_jobs_with_200_kib_of_unknown_settings_hold_little_in_redis(
    aiohttp_client, private_redis_url, data_dir
):
    """With no worker on this database the jobs wait in the queue, where what each carries can be read and weighed.

    Before: each job carried its 200 KiB field (about 2 MB queued for ten requests).
    """
    settings = make_settings(private_redis_url, data_dir, jobs_first_chunk_timeout_s=3.0)
    front = await aiohttp_client(create_app(settings))
    redis = Redis.from_url(private_redis_url)
    try:
        before = int((await redis.info("memory"))["used_memory"])
        body = junk_settings_body(200 * 1024)
        sent = [
            asyncio.create_task(front.post("/v1/text-to-speech/joe", data=body, headers=JSON_HEADERS))
            for _ in range(10)
        ]

        async def queued() -> int:
            return int(await redis.llen(protocol.QUEUE))

        deadline = time.monotonic() + 10
        while await queued() < 10 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert await queued() == 10
        grown = int((await redis.info("memory"))["used_memory"]) - before
        held = int(await redis.memory_usage(protocol.QUEUE) or 0)
        jobs = [protocol.Job.from_json(raw) for raw in await redis.lrange(protocol.QUEUE, 0, -1)]
        assert all(job.voice_settings == {"stability": 0.5} for job in jobs)
        assert held < 50_000, held
        assert grown < 1_000_000, grown
        for task in sent:  # no worker: each gets the first-chunk deadline's 503
            assert (await task).status == 503
    finally:
        await redis.aclose()


# ----- log lines -----------------------------------------------------------------------------------------------------

FORGED = "2026-01-01 00:00:00,000 INFO front zsynth.services.auth: forged"


@pytest.mark.heavy
@pytest.mark.parametrize("log_json", [False, True], ids=["plain", "json"])
def test_a_newline_in_the_path_cannot_forge_a_log_line(redis_url, tmp_path, log_json):
    """A real ``zsynth serve`` with a key logs the refused request: one line for it, the path quoted.

    Before (plain form): the ``%0A`` became a line of its own that read like the front's.
    """
    port = free_port()
    env = {
        **os.environ,
        "ZSYNTH_REDIS_URL": redis_url,
        "ZSYNTH_PORT": str(port),
        "ZSYNTH_DATA_DIR": str(tmp_path),
        "ZSYNTH_API_KEY": "the-real-key",
        "ZSYNTH_LOG_JSON": str(log_json).lower(),
    }
    log = tmp_path / "front.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "zsynth", "serve"], env=env, cwd=ROOT, stderr=sink)
        try:
            wait_for(
                lambda: b"front listening on" in log.read_bytes() or proc.poll() is not None, 30, "the front to listen"
            )
            # A route that needs a key (a path no route answers is told 404 without a check, and no log line).
            path = "/v1/voices/x%0A" + FORGED.replace(" ", "%20") + "%0D%0A" + "z" * 500

            async def ask() -> int:
                async with aiohttp.ClientSession() as session:
                    async with session.get(URL(f"http://127.0.0.1:{port}{path}", encoded=True)) as resp:
                        return resp.status

            assert asyncio.run(ask()) == 401
            wait_for(lambda: b"refused" in log.read_bytes(), 10, "the refusal to be logged")
        finally:
            proc.terminate()
            proc.wait(15)
    lines = log.read_text().splitlines()
    assert not any(line.startswith(FORGED) for line in lines), lines
    refused = [line for line in lines if "refused" in line and "/v1/voices" in line]
    assert len(refused) == 1, lines
    if log_json:
        assert all(json.loads(line) for line in lines if line.startswith("{"))
    else:
        assert "'/v1/voices/x\\n2026-01-01" in refused[0] and "\\r\\n" in refused[0]
        assert "z" * 500 not in refused[0] and "chars) refused" in refused[0]  # cut short, its length said


@pytest.mark.unit
def test_quoted_and_one_line():
    assert quoted("a\nb") == "'a\\nb'"
    assert quoted("x" * 300) == repr("x" * 200) + "...(300 chars)"
    assert one_line("a\nb\r\x1b[31m\u2028c\x85") == "a\\nb\\r\\x1b[31m\\u2028c\\x85"


# ----- unknown clone ids -----------------------------------------------------------------------------------------


@pytest.mark.unit
def test_a_trailing_newline_is_not_a_clone_id():
    """Before: ``^...$`` with match() took ``custom-abcd1234\\n`` as a clone id (and so as a directory name)."""
    assert is_clone_id("custom-abcd1234")
    assert not is_clone_id("custom-abcd1234\n")


@pytest.mark.unit
def test_missing_ids_are_bounded_in_count_and_time():
    now = [0.0]
    missing = MissingIds(ttl_s=10.0, size=3, clock=lambda: now[0])
    for n in range(100):
        missing.add(f"custom-made-up-{n:04d}")
    assert len(missing) == 3 and "custom-made-up-0099" in missing and "custom-made-up-0000" not in missing
    now[0] = 10.0
    assert "custom-made-up-0099" not in missing
    missing.add("custom-made-up-late")
    assert len(missing) == 1


async def put_behind_its_back(bucket: VoiceBucket, voice_id: str, reference: bytes) -> None:
    """Store a complete voice in the bucket without announcing it, as if its announcement were lost."""
    await bucket.put_voice(
        {**new_clone_meta("late", None, {}, [], 6.0, workspace="default"), "voice_id": voice_id}, reference
    )


@pytest.mark.stack
async def test_unknown_clone_ids_are_remembered_as_missing_in_a_bounded_list(
    aiohttp_client, aws_endpoint, private_redis_url, tmp_path
):
    """Before: every request for a made-up ``custom-`` id read the bucket again (a voice put in the bucket behind
    the front's back was found on the next request); now the answer is kept for ZSYNTH_VOICES_MISSING_TTL, in at
    most ZSYNTH_VOICES_MISSING_MAX ids."""
    bucket = await create_bucket()
    ttl = 3.0  # long enough for the bucket write below on a busy box (moto on loopback: well under a second)
    front = await start_front(
        aiohttp_client, private_redis_url, tmp_path, bucket, voices_missing_ttl_s=ttl, voices_missing_max=2
    )
    library = front.server.app[VOICE_LIBRARY]
    behind = VoiceBucket(bucket, PREFIX)
    await behind.open()
    reference = reference_file("wav")  # made before the clock starts: Piper speaks it
    first = "custom-madeup0000first"
    assert (await front.get(f"/v1/voices/{first}")).status == 404
    asked = time.monotonic()
    try:
        await put_behind_its_back(behind, first, reference)
    finally:
        await behind.close()
    assert time.monotonic() - asked < ttl
    assert (await front.get(f"/v1/voices/{first}")).status == 404  # remembered: the bucket was not asked again
    for n in range(20):
        assert (await front.get(f"/v1/voices/custom-madeup{n:04d}")).status == 404
    assert len(library.missing) <= 2
    await asyncio.sleep(max(0.0, asked + ttl + 0.1 - time.monotonic()))
    resp = await front.get(f"/v1/voices/{first}")  # forgotten after the TTL: fetched now
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["name"] == "late"


# ----- model ids -------------------------------------------------------------------------------------------------


@pytest.mark.stack
async def test_a_model_id_over_128_characters_is_refused_not_echoed(client):
    """Before: any length was accepted and echoed in x-model-id."""
    resp = await client.post("/v1/text-to-speech/joe", json={"text": "Hi.", "model_id": "m" * 129})
    assert resp.status == 422, await resp.text()
    detail = (await resp.json())["detail"]
    assert (detail["code"], detail["param"]) == ("invalid_parameters", "model_id")
    assert "x-model-id" not in resp.headers

    resp = await client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "joe", "model": "m" * 129})
    assert resp.status == 422, await resp.text()
    error = (await resp.json())["error"]
    assert (error["code"], error["param"], error["type"]) == ("invalid_parameters", "model", "invalid_request_error")

    resp = await client.post("/v1/text-to-speech/joe", json={"text": "Hi.", "model_id": "m" * 128})
    assert resp.status == 200, await resp.text()
    assert resp.headers["x-model-id"] == "m" * 128
    await resp.read()


@pytest.mark.unit
def test_the_new_settings_have_their_documented_defaults():
    defaults = Settings.from_env({})
    assert defaults.limits.max_json_body_bytes == JSON_LIMIT and defaults.limits.max_body_bytes == 25 * 1024 * 1024
    assert (defaults.voices.missing_ttl_s, defaults.voices.missing_max) == (30.0, 4096)
