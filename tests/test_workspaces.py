"""Workspaces (issue 49): each key's cloned voices and pronunciation dictionaries are its own workspace's.

Two table keys in two workspaces drive the official ``elevenlabs`` SDK against real fronts and the shared Piper
workers, with the voice library in a bucket on moto. Another workspace's clone or dictionary must be exactly an id
that never existed: not listed, 404 everywhere with nothing changed, and refused by synthesis as an unknown id is,
on every transport (HTTP, tokens, the realtime socket, Wyoming). The keys are written to the table as rows with a
``workspace`` attribute, so the same tests run (and fail) on the code from before workspaces.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from pathlib import Path
from typing import Any

import aioboto3
import numpy as np
import pytest
from elevenlabs import AsyncElevenLabs, PronunciationDictionaryVersionLocator
from elevenlabs.core.api_error import ApiError as SdkError
from elevenlabs.pronunciation_dictionaries import (
    BodyAddAPronunciationDictionaryV1PronunciationDictionariesAddFromRulesPostRulesItem_Alias as AliasRule,
)
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeVoice

from harness.audio import assert_speech, decode_audio
from harness.base import free_port
from harness.s3 import PREFIX, create_bucket, start_front
from harness.voice_clips import reference_file
from harness.ws import collect
from zsynth.services.auth import fingerprint, secret_hash
from zsynth.speech.wyoming.listener import LISTENER

STATIC = "workspaces-static-key"  # a static key: the default workspace
FMT = "pcm_22050"
TEXT = "Good evening, and welcome to the show."
DICTIONARIES_PREFIX = "team/dictionaries/"


def _key() -> str:
    return "zsk_live_" + secrets.token_urlsafe(32)


async def put_key(table: str, key: str, workspace: str) -> None:
    """A full key row in the keys table, in ``workspace`` (written as ``zsynth keys create --workspace`` does)."""
    item = {
        "key_hash": {"S": secret_hash(key)},
        "key_id": {"S": fingerprint(key)},
        "kind": {"S": "full"},
        "scope": {"S": "all"},
        "created_at": {"N": str(int(time.time()))},
        "workspace": {"S": workspace},
    }
    async with aioboto3.Session().client("dynamodb") as dynamodb:
        await dynamodb.put_item(TableName=table, Item=item)


def sdk(front: Any, key: str) -> AsyncElevenLabs:
    return AsyncElevenLabs(base_url=str(front.make_url("")).rstrip("/"), api_key=key)


async def speak(api: AsyncElevenLabs, voice_id: str, **kwargs: Any) -> bytes:
    return b"".join([c async for c in api.text_to_speech.convert(voice_id, text=TEXT, output_format=FMT, **kwargs)])


async def refusal(call: Any) -> tuple[int, Any]:
    """The status and body of an SDK call that must fail."""
    with pytest.raises(SdkError) as caught:
        await call
    return caught.value.status_code or 0, caught.value.body


def _detail(body: Any) -> dict[str, Any]:
    return dict(body["detail"]) if isinstance(body, dict) and "detail" in body else {}


def _same_refusal(foreign: tuple[int, Any], unknown: tuple[int, Any], foreign_id: str, unknown_id: str) -> None:
    """The refusal of another workspace's id reads exactly as that of an id that never existed."""
    assert foreign[0] == unknown[0], (foreign, unknown)

    def text(body: Any, voice_id: str) -> str:
        detail = _detail(body)
        detail.pop("request_id", None)  # each request's own
        return json.dumps(detail or body).replace(voice_id, "ID")

    assert text(foreign[1], foreign_id) == text(unknown[1], unknown_id)


async def _team_front(aiohttp_client: Any, redis_url: str, data_dir: Path, bucket: str, keys_table: str) -> Any:
    """A front on the shared workers: the voice library and the dictionaries in ``bucket``, the keys in the table and
    the static key."""
    return await start_front(
        aiohttp_client,
        redis_url,
        data_dir,
        bucket,
        auth_api_key=STATIC,
        auth_keys_table=keys_table,
        voices_dictionaries_prefix=DICTIONARIES_PREFIX,
    )


@pytest.fixture
async def team(aiohttp_client, aws_endpoint, redis_url, data_dir, shared_workers, keys_table):
    """A front on the shared workers with the voice library and the dictionaries in a bucket; keys: A (team-a), B
    (team-b) and a static key (default)."""
    bucket = await create_bucket()
    key_a, key_b = _key(), _key()
    await put_key(keys_table, key_a, "team-a")
    await put_key(keys_table, key_b, "team-b")
    front = await _team_front(aiohttp_client, redis_url, data_dir, bucket, keys_table)
    return {"front": front, "bucket": bucket, "table": keys_table, "a": key_a, "b": key_b}


async def _clone(api: AsyncElevenLabs, name: str) -> str:
    created = await api.voices.ivc.create(name=name, files=[("ref.wav", reference_file("wav"), "audio/wav")])
    return str(created.voice_id)


@pytest.mark.stack
async def test_a_clone_is_its_workspace_s_alone_through_the_sdk(team):
    front = team["front"]
    a, b, default = sdk(front, team["a"]), sdk(front, team["b"]), sdk(front, STATIC)
    voice_id = await _clone(a, "SecretVoiceOfA")
    made_up = "custom-NeverExisted0000"

    # Listed only in its workspace: v1, v2 (search) and the OpenAI picker.
    assert voice_id in {v.voice_id for v in (await a.voices.get_all()).voices}
    for other in (b, default):
        assert voice_id not in {v.voice_id for v in (await other.voices.get_all()).voices}
        found = await other.voices.search(search="SecretVoiceOfA", include_total_count=True)
        assert found.voices == [] and found.total_count == 0
    assert "joe" in {v.voice_id for v in (await b.voices.get_all()).voices}  # built-in voices are everyone's
    for key, sees in ((team["a"], True), (team["b"], False)):
        picker = await (await front.get("/v1/audio/voices", headers={"Authorization": f"Bearer {key}"})).json()
        assert (voice_id in {v["id"] for v in picker["voices"]}) is sees
    assert (await a.voices.get(voice_id)).name == "SecretVoiceOfA"

    # To B it is an id that never existed: read, settings, edit, settings edit and delete, with nothing changed.
    calls = [
        lambda v: b.voices.get(v),
        lambda v: b.voices.settings.get(v),
        lambda v: b.voices.update(v, name="Stolen"),
        lambda v: b.voices.settings.update(v, request={"stability": 0.1}),
        lambda v: b.voices.delete(v),
    ]
    for call in calls:
        _same_refusal(await refusal(call(voice_id)), await refusal(call(made_up)), voice_id, made_up)
        assert _detail((await refusal(call(voice_id)))[1]).get("status") == "voice_not_found"
    kept = await a.voices.get(voice_id)
    assert kept.name == "SecretVoiceOfA" and kept.settings is not None and kept.settings.stability == 0.5

    # Synthesis naming it: what a made-up clone id gets, never the clone; A's own request is spoken.
    _same_refusal(await refusal(speak(b, voice_id)), await refusal(speak(b, made_up)), voice_id, made_up)
    _same_refusal(await refusal(speak(default, voice_id)), await refusal(speak(default, made_up)), voice_id, made_up)
    assert_speech(*decode_audio(await speak(a, voice_id), FMT), TEXT)

    # A built-in voice's settings are every workspace's: only the default workspace saves them.
    before = await default.voices.settings.get("joe")
    refused = await refusal(b.voices.settings.update("joe", request={"stability": 0.1}))
    assert refused[0] == 400 and _detail(refused[1])["status"] == "voice_not_editable"
    assert await default.voices.settings.get("joe") == before

    # Its owner removes it; then it is gone for everyone.
    await a.voices.delete(voice_id)
    assert (await refusal(a.voices.get(voice_id)))[0] == 404


@pytest.mark.stack
async def test_tokens_and_the_socket_act_in_their_key_s_workspace(team):
    front = team["front"]
    voice_id = await _clone(sdk(front, team["a"]), "TokenVoiceOfA")
    tokens = {}
    for name in ("a", "b"):
        resp = await front.post("/v1/tokens/ephemeral", json={}, headers={"xi-api-key": team[name]})
        assert resp.status == 200, await resp.text()
        tokens[name] = (await resp.json())["token"]
    listed = {}
    for name, token in tokens.items():
        resp = await front.get("/v1/voices", headers={"Authorization": f"Bearer {token}"})
        listed[name] = {v["voice_id"] for v in (await resp.json())["voices"]}
    assert voice_id in listed["a"] and voice_id not in listed["b"]
    got = await front.get(f"/v1/voices/{voice_id}", headers={"Authorization": f"Bearer {tokens['b']}"})
    assert got.status == 404
    spoken = await front.post(
        f"/v1/text-to-speech/{voice_id}?output_format={FMT}",
        json={"text": TEXT},
        headers={"Authorization": f"Bearer {tokens['b']}"},
    )
    assert spoken.status == 404 and (await spoken.json())["detail"]["status"] == "voice_not_found"
    own = await front.post(
        f"/v1/text-to-speech/{voice_id}?output_format={FMT}",
        json={"text": TEXT},
        headers={"Authorization": f"Bearer {tokens['a']}"},
    )
    assert own.status == 200 and own.headers["x-voice-id"] == voice_id

    # A Vapi call acts in its secret's workspace too.
    for key, status in ((team["b"], 404), (team["a"], 200)):
        body = {
            "message": {
                "type": "voice-request",
                "text": TEXT,
                "sampleRate": 16000,
                "assistant": {"voice": {"provider": "custom-voice", "voiceId": voice_id}},
            }
        }
        vapi = await front.post("/v1/vapi/tts", json=body, headers={"X-Vapi-Secret": key})
        assert vapi.status == status, await vapi.text()
        if status == 404:
            assert (await vapi.json())["detail"]["code"] == "voice_not_found"
        else:
            assert_speech(*decode_audio(await vapi.read(), "pcm_16000"), TEXT)

    # A single-use token of B's key, on the realtime socket: refused as an unknown voice, nothing spoken.
    minted = await front.post("/v1/single-use-token/tts_websocket", headers={"xi-api-key": team["b"]})
    assert minted.status == 200, await minted.text()
    single = (await minted.json())["token"]
    path = f"/v1/text-to-speech/{voice_id}/stream-input?output_format={FMT}&single_use_token={single}"
    ws = await front.ws_connect(path)
    await ws.send_json({"text": " "})
    await ws.send_json({"text": TEXT + " ", "flush": True})
    await ws.send_json({"text": ""})
    got_ws = await collect(ws)
    assert not got_ws.audio() and got_ws.errors and got_ws.errors[0]["error"] == "voice_not_found", got_ws.frames


@pytest.mark.stack
async def test_a_dictionary_is_its_workspace_s_alone_through_the_sdk(team):
    front = team["front"]
    a, b = sdk(front, team["a"]), sdk(front, team["b"])
    made = await a.pronunciation_dictionaries.create_from_rules(
        name="secret-brands", rules=[AliasRule(string_to_replace="zsynth", alias="zee synth")]
    )
    made_up = "NoSuchDictionary0000"
    assert made.id in {
        d.id for d in (await a.pronunciation_dictionaries.list(page_size=100)).pronunciation_dictionaries
    }
    listed_b = await b.pronunciation_dictionaries.list(page_size=100)
    assert made.id not in {d.id for d in listed_b.pronunciation_dictionaries}

    calls = [
        lambda d: b.pronunciation_dictionaries.get(d),
        lambda d: b.pronunciation_dictionaries.update(d, name="stolen"),
        lambda d: b.pronunciation_dictionaries.rules.add(d, rules=[AliasRule(string_to_replace="x", alias="y")]),
        lambda d: b.pronunciation_dictionaries.rules.remove(d, rule_strings=["zsynth"]),
        lambda d: b.pronunciation_dictionaries.rules.set(d, rules=[AliasRule(string_to_replace="x", alias="y")]),
    ]
    for call in calls:
        _same_refusal(await refusal(call(made.id)), await refusal(call(made_up)), made.id, made_up)
    for ids in ((made.id, made.version_id), (made_up, made.version_id)):
        resp = await front.get(
            f"/v1/pronunciation-dictionaries/{ids[0]}/{ids[1]}/download", headers={"xi-api-key": team["b"]}
        )
        assert resp.status == 404
    deleted = await front.delete(f"/v1/pronunciation-dictionaries/{made.id}", headers={"xi-api-key": team["b"]})
    assert deleted.status == 404
    kept = await a.pronunciation_dictionaries.get(made.id)
    assert kept.name == "secret-brands" and [r.string_to_replace for r in kept.rules] == ["zsynth"]

    # A locator naming it: the same 4xx as an unknown dictionary, with or without its version.
    for version in (None, made.version_id):
        foreign = PronunciationDictionaryVersionLocator(pronunciation_dictionary_id=made.id, version_id=version)
        unknown = PronunciationDictionaryVersionLocator(pronunciation_dictionary_id=made_up, version_id=version)
        _same_refusal(
            await refusal(speak(b, "joe", pronunciation_dictionary_locators=[foreign])),
            await refusal(speak(b, "joe", pronunciation_dictionary_locators=[unknown])),
            made.id,
            made_up,
        )
    locator = PronunciationDictionaryVersionLocator(pronunciation_dictionary_id=made.id, version_id=None)
    assert_speech(*decode_audio(await speak(a, "joe", pronunciation_dictionary_locators=[locator]), FMT), TEXT)
    ws = await front.ws_connect("/v1/text-to-speech/joe/stream-input", headers={"xi-api-key": team["b"]})
    await ws.send_json({"text": " ", "pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": made.id}]})
    got = await collect(ws)
    assert got.close_code == 1008 and got.errors[0]["error"] == "pronunciation_dictionary_not_found"


@pytest.mark.stack
async def test_wyoming_acts_in_its_workspace(aiohttp_client, aws_endpoint, redis_url, data_dir, shared_workers, team):
    api_a = sdk(team["front"], team["a"])
    clone_a = await _clone(api_a, "SecretVoiceOfA")
    clone_default = await _clone(sdk(team["front"], STATIC), "HouseVoice")

    async def front(workspace: str | None) -> int:
        extra = {"wyoming_workspace": workspace} if workspace is not None else {}
        client = await start_front(
            aiohttp_client,
            redis_url,
            data_dir,
            team["bucket"],
            auth_api_key=STATIC,
            wyoming_uri=("127.0.0.1", free_port()),
            **extra,
        )
        return int(client.app[LISTENER].port)

    async def described(port: int) -> set[str]:
        async with AsyncTcpClient("127.0.0.1", port, connect_timeout=5.0, read_timeout=30.0) as client:
            await client.write_event(Describe().event())
            event = await client.read_event()
        assert event is not None and Info.is_type(event.type)
        return {v.name for v in Info.from_event(event).tts[0].voices}

    async def synthesized(port: int, voice: str) -> tuple[str, Any]:
        async with AsyncTcpClient("127.0.0.1", port, connect_timeout=5.0, read_timeout=60.0) as client:
            await client.write_event(Synthesize(TEXT, voice=SynthesizeVoice(voice)).event())
            pcm = b""
            while True:
                event = await client.read_event()
                assert event is not None
                if Error.is_type(event.type):
                    return "error", Error.from_event(event).code
                if event.type == "audio-chunk":
                    pcm += event.payload or b""
                if event.type == "audio-stop":
                    return "audio", pcm

    plain = await front(None)  # ZSYNTH_WYOMING_WORKSPACE unset: the default workspace
    names = await described(plain)
    assert clone_default in names and clone_a not in names and "joe" in names
    kind, code = await synthesized(plain, clone_a)
    assert (kind, code) == await synthesized(plain, "custom-NeverExisted0000") == ("error", "voice_not_found")
    kind, pcm = await synthesized(plain, clone_default)
    assert kind == "audio"

    team_a = await front("team-a")
    names = await described(team_a)
    assert clone_a in names and clone_default not in names
    kind, pcm = await synthesized(team_a, clone_a)
    assert kind == "audio"
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    assert_speech(samples, 22050, TEXT)


@pytest.mark.stack
async def test_the_owner_survives_a_second_box(aiohttp_client, aws_endpoint, redis_url, tmp_path, team):
    voice_id = await _clone(sdk(team["front"], team["a"]), "TravellingVoice")
    async with aioboto3.Session().client("s3") as s3:
        head = await s3.head_object(Bucket=team["bucket"], Key=f"{PREFIX}{voice_id}/meta.json")
        meta = json.loads(
            await (await s3.get_object(Bucket=team["bucket"], Key=f"{PREFIX}{voice_id}/meta.json"))["Body"].read()
        )
    assert meta["workspace"] == "team-a" and head["Metadata"].get("workspace") == "team-a"

    # A second box on the same Redis and bucket, with an empty disk: it restores the voice with its owner.
    box2 = await start_front(
        aiohttp_client,
        redis_url,
        tmp_path / "box2",
        team["bucket"],
        auth_api_key=STATIC,
        auth_keys_table=team["table"],
    )
    a2, b2 = sdk(box2, team["a"]), sdk(box2, team["b"])
    assert voice_id in {v.voice_id for v in (await a2.voices.get_all()).voices}
    assert voice_id not in {v.voice_id for v in (await b2.voices.get_all()).voices}
    assert (await refusal(b2.voices.get(voice_id)))[0] == 404
    assert (await refusal(speak(b2, voice_id)))[0] == 404
    stored = json.loads((tmp_path / "box2" / "voices" / voice_id / "meta.json").read_text())
    assert stored["workspace"] == "team-a"

    # Removed by its owner on the second box: the tombstone names the workspace.
    await a2.voices.delete(voice_id)
    async with aioboto3.Session().client("s3") as s3:
        obj = await s3.get_object(Bucket=team["bucket"], Key=f"{PREFIX}{voice_id}/tombstone.json")
        tombstone = json.loads(await obj["Body"].read())
    assert tombstone == {"voice_id": voice_id, "workspace": "team-a"}


@pytest.mark.stack
async def test_clones_and_dictionaries_from_before_workspaces_are_the_default_s(
    aiohttp_client, aws_endpoint, redis_url, data_dir, shared_workers, keys_table, tmp_path
):
    """A bucket written by the code from before workspaces (meta.json without an owner) restores into the default
    workspace: the static key and default table keys see and use it, other workspaces do not."""
    bucket = await create_bucket()
    voice_id = "custom-" + secrets.token_hex(8)
    old_meta = {
        "format": 1,
        "voice_id": voice_id,
        "name": "OldVoice",
        "description": None,
        "labels": {},
        "created_at_unix": 1_700_000_000,
        "samples": [],
        "settings": {"stability": 0.5, "similarity_boost": 0.75, "style": 0.0, "use_speaker_boost": True, "speed": 1},
        "revision": 0,
        "reference": "reference.wav",
        "reference_seconds": 12.0,
    }
    dictionary_id = "olddict" + secrets.token_hex(4)
    version_id = "v" + secrets.token_hex(4)
    old_dictionary = {
        "id": dictionary_id,
        "name": "old",
        "description": None,
        "creation_time_unix": 1_700_000_000,
        "latest_version_id": version_id,
        "latest_version_rules_num": 1,
    }
    rules = {"rules": [{"type": "alias", "string_to_replace": "zsynth", "alias": "zee synth"}]}
    async with aioboto3.Session().client("s3") as s3:
        await s3.put_object(Bucket=bucket, Key=f"{PREFIX}{voice_id}/reference.wav", Body=reference_file("wav"))
        await s3.put_object(Bucket=bucket, Key=f"{PREFIX}{voice_id}/meta.json", Body=json.dumps(old_meta).encode())
        base = f"{DICTIONARIES_PREFIX}{dictionary_id}/"
        await s3.put_object(Bucket=bucket, Key=f"{base}{version_id}.json", Body=json.dumps(rules).encode())
        await s3.put_object(Bucket=bucket, Key=f"{base}meta.json", Body=json.dumps(old_dictionary).encode())
    key_default, key_b = _key(), _key()
    await put_key(keys_table, key_default, "default")
    await put_key(keys_table, key_b, "team-b")
    front = await _team_front(aiohttp_client, redis_url, data_dir, bucket, keys_table)
    for key in (STATIC, key_default):
        api = sdk(front, key)
        assert voice_id in {v.voice_id for v in (await api.voices.get_all()).voices}
        assert dictionary_id in {
            d.id for d in (await api.pronunciation_dictionaries.list(page_size=100)).pronunciation_dictionaries
        }
    api = sdk(front, STATIC)
    locator = PronunciationDictionaryVersionLocator(pronunciation_dictionary_id=dictionary_id, version_id=None)
    assert_speech(*decode_audio(await speak(api, voice_id, pronunciation_dictionary_locators=[locator]), FMT), TEXT)
    b = sdk(front, key_b)
    assert voice_id not in {v.voice_id for v in (await b.voices.get_all()).voices}
    assert (await refusal(b.voices.get(voice_id)))[0] == 404
    assert (await refusal(b.pronunciation_dictionaries.get(dictionary_id)))[0] == 404
    assert (await refusal(speak(b, voice_id)))[0] == 404


@pytest.mark.unit
def test_workspace_names_are_checked() -> None:
    from zsynth.core import workspaces

    for good in ("default", "team-a", "a" * 64, "0"):
        assert workspaces.check_name(good) == good
    for bad in ("", "Team", "a_b", "a b", "a" * 65, "é", "team/a"):
        with pytest.raises(ValueError, match="lowercase letters, digits and '-'"):
            workspaces.check_name(bad)
    assert workspaces.owner_of({}) == "default" and workspaces.owner_of({"workspace": "x"}) == "x"
    assert workspaces.owner_of({"workspace": "../etc"}) == "default"


@pytest.mark.unit
def test_voices_list_shows_each_clone_s_workspace(tmp_path, capsys) -> None:
    import argparse
    import io

    from zsynth.core.config import Settings
    from zsynth.core.voices.store import VoiceStore
    from zsynth.services.voices import new_clone_meta
    from zsynth.voiceadmin import run_voices

    settings = Settings(data_dir=tmp_path)
    store = VoiceStore(settings.voices_dir)
    store.ensure()
    mine = store.install(new_clone_meta("Mine", None, {}, [], 6.0, workspace="team-a"), b"RIFF")
    old_meta = new_clone_meta("Old", None, {}, [], 6.0, workspace="x")
    del old_meta["workspace"]  # written before workspaces: the default one's
    old = store.install(old_meta, b"RIFF")

    def listed(**kwargs: object) -> dict[str, list[str]]:
        out = io.StringIO()
        args = argparse.Namespace(**{"all": False, "workspace": None, **kwargs})
        assert run_voices(settings, args, out) == 0
        return {line.split()[0]: line.split() for line in out.getvalue().splitlines()[1:]}

    assert set(listed()) == {old.voice_id} and listed()[old.voice_id][1] == "default"
    assert (
        set(listed(workspace="team-a")) == {mine.voice_id} and listed(workspace="team-a")[mine.voice_id][1] == "team-a"
    )
    assert set(listed(all=True)) == {mine.voice_id, old.voice_id}
    bad = argparse.Namespace(all=False, workspace="Team A")
    assert run_voices(settings, bad, io.StringIO()) == 2
    assert "not a workspace name" in capsys.readouterr().err


@pytest.mark.stack
async def test_an_avatar_session_token_acts_in_its_key_s_workspace(
    aiohttp_client, aws_endpoint, redis_url, data_dir, keys_table
):
    from harness.base import make_settings
    from zsynth.avatar.app import create_avatar_app
    from zsynth.services.auth import Authenticator
    from zsynth.services.keystore import KeyStore

    key = _key()
    await put_key(keys_table, key, "team-a")
    settings = make_settings(redis_url, data_dir, auth_keys_table=keys_table)
    server = await aiohttp_client(create_avatar_app(settings))
    resp = await server.post("/v1/streaming.create_token", json={}, headers={"X-Api-Key": key})
    assert resp.status == 200, await resp.text()
    token = (await resp.json())["data"]["token"]
    store = KeyStore(keys_table)
    fresh = Authenticator(store=store)  # another front: it reads the token's row from the table
    await fresh.start()
    try:
        credential = await fresh.verify(token)
        record = await store.get(secret_hash(token))
    finally:
        await fresh.close()
    assert credential.kind == "ephemeral" and credential.workspace == "team-a"
    assert record is not None and record.workspace == "team-a"


@pytest.mark.stack
async def test_wyoming_jobs_count_against_their_workspace_s_queue_owner(aiohttp_client, private_redis_url, tmp_path):
    """No worker takes the job here, so it waits on the queue where its owner can be read."""
    from redis.asyncio import Redis

    from harness.base import make_settings
    from harness.wyoming_client import wyoming_front
    from zsynth.core import protocol

    settings = make_settings(
        private_redis_url, tmp_path, wyoming_uri=("127.0.0.1", free_port()), wyoming_workspace="team-a"
    )
    port = await wyoming_front(aiohttp_client, settings)
    redis = Redis.from_url(private_redis_url)
    try:
        async with AsyncTcpClient("127.0.0.1", port, connect_timeout=5.0, read_timeout=30.0) as client:
            await client.write_event(Synthesize("Hello from the kitchen.").event())
            owners: list[str] = []
            for _ in range(200):
                owners = [json.loads(raw).get("owner") for raw in await redis.lrange(protocol.QUEUE, 0, -1)]
                if owners:
                    break
                await asyncio.sleep(0.05)
        assert owners == ["workspace:team-a"], owners
    finally:
        await redis.aclose()


@pytest.mark.stack
async def test_another_workspace_s_unusable_clone_reads_as_unknown(
    aiohttp_client, aws_endpoint, private_redis_url, tmp_path, keys_table
):
    """A clone in the bucket that no box takes (its clip over this front's limit) tells its owner why; to another
    workspace it is an id that never existed."""
    from zsynth.core.voices.bucket import VoiceBucket
    from zsynth.services.voices import new_clone_meta

    bucket = await create_bucket()
    remote = VoiceBucket(bucket, PREFIX)
    await remote.open()
    try:
        meta = new_clone_meta("TooBig", None, {}, [], 12.0, workspace="team-a")
        await remote.put_voice(meta, reference_file("wav"))
    finally:
        await remote.close()
    key_a, key_b = _key(), _key()
    await put_key(keys_table, key_a, "team-a")
    await put_key(keys_table, key_b, "team-b")
    front = await start_front(
        aiohttp_client, private_redis_url, tmp_path, bucket, auth_keys_table=keys_table, voices_clip_max_bytes=100_000
    )
    voice_id = meta["voice_id"]
    own = await front.get(f"/v1/voices/{voice_id}", headers={"xi-api-key": key_a})
    other = await front.get(f"/v1/voices/{voice_id}", headers={"xi-api-key": key_b})
    made_up = await front.get("/v1/voices/custom-NeverExisted0000", headers={"xi-api-key": key_b})
    assert own.status == other.status == made_up.status == 404
    assert "cannot be used" in (await own.json())["detail"]["message"]
    assert (await other.json())["detail"]["message"] == f"A voice with the voice_id {voice_id} was not found."


@pytest.mark.stack
@pytest.mark.usefixtures("loopback_ice")
async def test_the_avatar_speaks_and_manages_only_its_workspace_s(
    aiohttp_client, aws_endpoint, redis_url, data_dir, shared_workers, keys_table
):
    """The avatar server follows the same voice library: a session of workspace B cannot speak A's clone (an
    ``error`` event, as for an unknown clone id), and B's full key neither lists, reads, closes nor attaches to A's
    session."""
    from harness.avatar import Viewer, open_session
    from harness.base import make_settings
    from zsynth.avatar.app import create_avatar_app
    from zsynth.speech.app import create_app

    key_a, key_b = _key(), _key()
    await put_key(keys_table, key_a, "team-a")
    await put_key(keys_table, key_b, "team-b")
    settings = make_settings(redis_url, data_dir, auth_keys_table=keys_table, avatar_connect_timeout_s=30.0)
    speech = await aiohttp_client(create_app(settings))
    clone_a = await _clone(sdk(speech, key_a), "AvatarVoiceOfA")
    avatar = await aiohttp_client(create_avatar_app(settings))
    viewers = [Viewer(), Viewer()]
    try:
        session_a, _control_a = await open_session(avatar, viewers[0], {"X-Api-Key": key_a})
        session_b, control_b = await open_session(avatar, viewers[1], {"X-Api-Key": key_b})

        listed_b = await (await avatar.get("/v1/sessions", headers={"X-Api-Key": key_b})).json()
        assert [s["session_id"] for s in listed_b["data"]] == [session_b]
        listed_a = await (await avatar.get("/v1/sessions", headers={"X-Api-Key": key_a})).json()
        assert [s["session_id"] for s in listed_a["data"]] == [session_a]
        for method in ("GET", "DELETE"):
            resp = await avatar.request(method, f"/v1/sessions/{session_a}", headers={"X-Api-Key": key_b})
            assert resp.status == 404 and (await resp.json())["code"] == "session_not_found"
        attach = await avatar.get(f"/control/{session_a}", headers={"X-Api-Key": key_b})
        assert attach.status == 404
        assert (await avatar.get(f"/v1/sessions/{session_a}", headers={"X-Api-Key": key_a})).status == 200

        await control_b.ws.send_json({"type": "speak", "text": TEXT, "voice_id": clone_a})
        error = await control_b.next("error")
        assert error["code"] == "voice_not_found", error
    finally:
        for viewer in viewers:
            await viewer.close()


@pytest.mark.stack
async def test_an_unreadable_dictionary_is_unknown_outside_the_default_workspace(team):
    """A meta.json nobody can read names no owner: the default workspace (whose everything from before workspaces
    is) is told it cannot be used; any other workspace gets what an unknown id gets."""
    front, dictionary_id = team["front"], "broken" + secrets.token_hex(4)
    async with aioboto3.Session().client("s3") as s3:
        key = f"{DICTIONARIES_PREFIX}{dictionary_id}/meta.json"
        await s3.put_object(Bucket=team["bucket"], Key=key, Body=b'{"id": "not this one"}')
    path = f"/v1/pronunciation-dictionaries/{dictionary_id}"
    owner = await front.get(path, headers={"xi-api-key": STATIC})
    assert owner.status == 422
    other = await front.get(path, headers={"xi-api-key": team["b"]})
    unknown = await front.get(f"/v1/pronunciation-dictionaries/{dictionary_id}x", headers={"xi-api-key": team["b"]})
    assert other.status == unknown.status == 404
    assert (await other.json())["detail"]["code"] == (await unknown.json())["detail"]["code"]
    assert (await front.delete(path, headers={"xi-api-key": team["b"]})).status == 404
    locators = [{"pronunciation_dictionary_id": dictionary_id}]
    named = await front.post(
        "/v1/text-to-speech/joe",
        json={"text": TEXT, "pronunciation_dictionary_locators": locators},
        headers={"xi-api-key": team["b"]},
    )
    assert named.status == 404 and (await named.json())["detail"]["code"] == "pronunciation_dictionary_not_found"
    assert (await front.get(path, headers={"xi-api-key": STATIC})).status == 422  # still there


@pytest.mark.unit
async def test_the_voice_service_holds_the_rules_without_a_transport(tmp_path) -> None:
    """The workspace rule and the deletion and edit rules are the voice service's, whatever transport calls it."""
    from zsynth.core.codes import ApiCode
    from zsynth.core.voices.store import VoiceStore
    from zsynth.services.voice_service import VoiceMissing, VoiceRefused, VoiceService
    from zsynth.services.voices import VoiceCatalog, new_clone_meta

    store = VoiceStore(tmp_path)
    store.ensure()
    theirs = store.install(new_clone_meta("Theirs", None, {}, [], 6.0, workspace="team-b"), b"RIFF")
    pinned = store.install(new_clone_meta("Pinned", None, {}, [], 6.0, workspace="team-b"), b"RIFF")
    service = VoiceService(VoiceCatalog(store, "piper", pinned.voice_id), None, clip_limit=1 << 20)

    assert (await service.lookup(theirs.voice_id, "team-b"))["name"] == "Theirs"
    with pytest.raises(VoiceMissing) as foreign:
        await service.lookup(theirs.voice_id, "team-a")
    with pytest.raises(VoiceMissing) as unknown:
        await service.lookup("custom-NeverExisted0000", "team-a")
    assert foreign.value.message == f"A voice with the voice_id {theirs.voice_id} was not found."
    assert unknown.value.message == "A voice with the voice_id custom-NeverExisted0000 was not found."
    assert (await service.lookup(pinned.voice_id, "team-a"))["name"] == "Pinned"  # the swap-out voice is everyone's
    assert [v["name"] for v in service.listing("team-a") if v["category"] == "cloned"] == ["Pinned"]

    for voice_id, code in (("joe", ApiCode.VOICE_NOT_DELETABLE), (pinned.voice_id, ApiCode.VOICE_NOT_DELETABLE)):
        with pytest.raises(VoiceRefused) as refused:
            await service.delete(voice_id, "default")
        assert refused.value.code == code
    with pytest.raises(VoiceMissing):
        await service.delete(theirs.voice_id, "team-a")
    with pytest.raises(VoiceRefused) as not_editable:
        await service.check_editable("joe", "default")
    assert not_editable.value.code == ApiCode.VOICE_NOT_EDITABLE
    with pytest.raises(VoiceRefused, match="only keys of the default workspace"):
        await service.save_settings("joe", "team-a", {}, {"speed": 1.1})
    assert store.has(theirs.voice_id), "nothing was changed"


@pytest.mark.unit
async def test_the_dictionary_service_holds_the_rules_without_a_transport(tmp_path) -> None:
    """Another workspace's dictionary is missing to the dictionary service, and its versions too."""
    from zsynth.core.text.dictionaries.store import DictionaryStore, DirectoryBackend
    from zsynth.services.dictionaries import (
        MAX_RULES,
        DictionaryNotFound,
        DictionaryService,
        InvalidLexicon,
        Rule,
        TooManyRules,
        VersionNotFound,
    )

    service = DictionaryService(DictionaryStore(DirectoryBackend(tmp_path)))
    made = await service.create("Names", None, [Rule("zsynth", "alias", alias="zee synth")], "team-b")
    assert (await service.get(made.id, "team-b")).rules == made.rules
    with pytest.raises(DictionaryNotFound):
        await service.get(made.id, "team-a")
    with pytest.raises(VersionNotFound):
        await service.download(made.id, made.version_id, "team-a")
    assert b"zee synth" in await service.download(made.id, made.version_id, "team-b")
    assert await service.listing("team-a", include_archived=True, by_name=False, descending=True) == []
    with pytest.raises(DictionaryNotFound):
        await service.delete(made.id, "team-a")
    with pytest.raises(InvalidLexicon):
        await service.create_from_pls("Bad", None, b"not a lexicon", "team-b")
    many = [Rule(f"w{i}", "alias", alias="x") for i in range(MAX_RULES)]
    with pytest.raises(TooManyRules):
        await service.add_rules(made, many)
    await service.delete(made.id, "team-b")
    with pytest.raises(DictionaryNotFound):
        await service.get(made.id, "team-b")
