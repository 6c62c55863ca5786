"""Lexicons that cannot inflate, rules that obey one set of checks, bounded caches, and dictionaries that can go.

Before: a PLS under 1 MB with a DTD became an 80 MB grapheme, every such upload kept 76-139 MB in the front for
good, other fronts answered 500 for it, PLS rules skipped the 200-character bound, and there was no DELETE.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aioboto3
import aiohttp
import pytest
from elevenlabs import AsyncElevenLabs
from elevenlabs.core.api_error import ApiError as SdkError
from elevenlabs.pronunciation_dictionaries import (
    BodyAddAPronunciationDictionaryV1PronunciationDictionariesAddFromRulesPostRulesItem_Alias as AliasRule,
)

from harness.base import make_settings
from harness.fronts import front_process
from harness.measure import rss_mb
from harness.s3 import bucket_keys, create_bucket
from harness.upload_bodies import inflating_pls, lexicon, lexicon_form
from zsynth.core.text.dictionaries.cache import ByteBudgetCache
from zsynth.core.text.dictionaries.rules import MAX_STRING_CHARS, Rule
from zsynth.core.text.dictionaries.store import (
    MAX_VERSION_BYTES,
    METAS_BUDGET,
    MISSES_BUDGET,
    BucketBackend,
    DictionaryStore,
    DictionaryUnreadable,
    DirectoryBackend,
    rules_bytes,
)
from zsynth.speech.app import create_app

BASE = "/v1/pronunciation-dictionaries"
TIMEOUT = aiohttp.ClientTimeout(total=60)
NASA = "<grapheme>NASA</grapheme><alias>National Aeronautics and Space Administration</alias>"


@pytest.fixture(scope="module")
def front(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str, Path]]:
    """One open front process of its own: (pid, base URL, data directory)."""
    data = tmp_path_factory.mktemp("lexicons")
    with front_process(redis_url, data, ZSYNTH_LOG_LEVEL="WARNING") as (proc, base):
        yield proc.pid, base, data


async def post_lexicon(base: str, pls: bytes, name: str = "lexicon") -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.post(base + BASE + "/add-from-file", data=lexicon_form(name, pls)) as resp,
    ):
        return resp.status, await resp.json()


async def listed_names(base: str) -> set[str]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session, session.get(base + BASE) as resp:
        return {d["name"] for d in (await resp.json())["pronunciation_dictionaries"]}


# ----- PLS: no DTD, the same rule checks as JSON -------------------------------------------------------------------


@pytest.mark.heavy
async def test_self_inflating_lexicons_are_refused_and_the_front_keeps_no_memory(front):
    pid, base, _ = front
    bomb = inflating_pls()
    assert len(bomb) < 1_000_000
    status, _ = await post_lexicon(base, lexicon(NASA), "warm-up")  # first-use allocations are not the bomb's
    assert status == 200
    before = rss_mb(pid)
    for n in range(5):
        status, body = await post_lexicon(base, bomb, f"bomb {n}")
        assert status == 400, body
        assert body["detail"]["code"] == "invalid_pls" and "DTD" in body["detail"]["message"], body
        assert body["detail"]["param"] == "file"
    await asyncio.sleep(1)
    grown = rss_mb(pid) - before
    assert grown <= 5.0, f"the front kept {grown:.1f} MB after five refused lexicon bombs"
    assert not any(name.startswith("bomb") for name in await listed_names(base))


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("doctype", "lexeme"),
    [
        ("<!DOCTYPE lexicon>", NASA),
        ('<!DOCTYPE lexicon [<!ENTITY n "NASA">]>', "<grapheme>&n;</grapheme><alias>the agency</alias>"),
        ('<!DOCTYPE lexicon SYSTEM "http://127.0.0.1:9/pls.dtd">', NASA),
        ('<!DOCTYPE lexicon [<!ENTITY x SYSTEM "file:///etc/passwd">]>', "<grapheme>&x;</grapheme><alias>x</alias>"),
    ],
    ids=["bare", "internal-entity", "external-dtd", "xxe"],
)
async def test_a_lexicon_with_any_dtd_is_refused(front, doctype, lexeme):
    _, base, _ = front
    status, body = await post_lexicon(base, lexicon(lexeme, doctype=doctype), "with a DTD")
    assert status == 400 and body["detail"]["code"] == "invalid_pls", body
    assert "DTD" in body["detail"]["message"], body
    assert "root:" not in json.dumps(body)  # nothing of /etc/passwd ever comes back
    assert "with a DTD" not in await listed_names(base)


@pytest.mark.heavy
async def test_pls_rules_get_the_checks_json_rules_get(front):
    _, base, _ = front
    at_bound = "x" * MAX_STRING_CHARS
    status, body = await post_lexicon(base, lexicon(f"<grapheme>{at_bound}</grapheme><alias>y</alias>"), "at bound")
    assert status == 200, body
    for lexeme in (
        f"<grapheme>{at_bound}x</grapheme><alias>y</alias>",
        f"<grapheme>word</grapheme><alias>{at_bound}x</alias>",
        f"<grapheme>word</grapheme><phoneme>{at_bound}x</phoneme>",
    ):
        status, body = await post_lexicon(base, lexicon(NASA, lexeme), "too long")
        assert status == 400 and body["detail"]["code"] == "invalid_pls", body
        message = body["detail"]["message"]
        assert message.startswith("Lexeme 2 of the PLS lexicon") and f"at most {MAX_STRING_CHARS}" in message, body
    # The same string as a JSON rule gets the same refusal.
    rule = {"type": "alias", "string_to_replace": at_bound + "x", "alias": "y"}
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.post(base + BASE + "/add-from-rules", json={"name": "json", "rules": [rule]}) as resp,
    ):
        assert resp.status == 422
        assert f"at most {MAX_STRING_CHARS}" in (await resp.json())["detail"]["message"]


# ----- stored rules a front cannot use -----------------------------------------------------------------------------


def write_dictionary(data: Path, dictionary_id: str, version: bytes) -> None:
    """A dictionary as another program (or an older front, which kept PLS graphemes of any length) stored it."""
    folder = data / "dictionaries" / dictionary_id
    folder.mkdir(parents=True)
    (folder / "v1.json").write_bytes(version)
    meta = {
        "id": dictionary_id,
        "name": "old",
        "description": None,
        "creation_time_unix": 1700000000,
        "latest_version_id": "v1",
        "latest_version_rules_num": 1,
    }
    (folder / "meta.json").write_text(json.dumps(meta))


@pytest.mark.heavy
@pytest.mark.parametrize(
    "version",
    [
        json.dumps({"rules": [{"type": "alias", "string_to_replace": "x" * 80_000, "alias": "y"}]}).encode(),
        b"{not json",
        json.dumps({"rules": "none"}).encode(),
    ],
    ids=["long-grapheme", "not-json", "no-rule-list"],
)
async def test_stored_rules_that_cannot_be_used_are_a_4xx_and_can_be_mended(front, version):
    _, base, data = front
    dictionary_id = f"old{secrets.token_hex(6)}"
    write_dictionary(data, dictionary_id, version)
    locator = {"pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": dictionary_id}]}
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        calls: list[tuple[str, str, dict[str, Any] | None]] = [
            ("GET", f"{BASE}/{dictionary_id}", None),
            ("GET", f"{BASE}/{dictionary_id}/v1/download", None),
            ("POST", f"{BASE}/{dictionary_id}/add-rules", {"rules": []}),
            ("POST", "/v1/text-to-speech/joe", {"text": "Hello x.", **locator}),
            ("POST", "/v1/text-to-speech/joe/with-timestamps", {"text": "Hello x.", **locator}),
        ]
        for method, path, body in calls:
            async with session.request(method, base + path, json=body) as resp:
                answer = await resp.json()
                assert resp.status == 422, (path, answer)
                assert answer["detail"]["code"] == "pronunciation_dictionary_unreadable", (path, answer)
                assert "cannot use" in answer["detail"]["message"], answer
        rules = {"rules": [{"type": "alias", "string_to_replace": "x", "alias": "ex"}]}
        async with session.post(f"{base}{BASE}/{dictionary_id}/set-rules", json=rules) as resp:
            assert resp.status == 200, await resp.text()  # set-rules needs nothing of the old version
        async with session.get(f"{base}{BASE}/{dictionary_id}") as resp:
            assert resp.status == 200 and (await resp.json())["rules"][0]["alias"] == "ex"
        async with session.delete(f"{base}{BASE}/{dictionary_id}") as resp:
            assert resp.status == 200 and (await resp.json()) == {"status": "ok"}


# ----- DELETE, on every front --------------------------------------------------------------------------------------


@pytest.mark.stack
async def test_delete_removes_a_dictionary_for_every_front(aiohttp_client, aws_endpoint, redis_url, tmp_path):
    bucket = await create_bucket()
    fronts = [
        await aiohttp_client(create_app(make_settings(redis_url, tmp_path / name, voices_bucket=bucket)))
        for name in ("a", "b")
    ]
    a, b = (AsyncElevenLabs(base_url=str(f.make_url("")).rstrip("/"), api_key="unused") for f in fronts)
    made = await a.pronunciation_dictionaries.create_from_rules(
        name="going", rules=[AliasRule(string_to_replace="NASA", alias="the agency")]
    )
    # Front B reads it (its version is now in B's cache) and would speak with it.
    assert (await b.pronunciation_dictionaries.get(made.id)).rules[0].alias == "the agency"
    download = f"{BASE}/{made.id}/{made.version_id}/download"
    assert (await fronts[1].get(download)).status == 200

    resp = await fronts[0].delete(f"{BASE}/{made.id}")
    assert resp.status == 200 and await resp.json() == {"status": "ok"}
    await asyncio.sleep(2.1)  # other fronts read whether it exists again after LATEST_TTL_S
    with pytest.raises(SdkError) as gone:
        await b.pronunciation_dictionaries.get(made.id)
    assert gone.value.status_code == 404
    assert (await fronts[1].get(download)).status == 404
    locator = {"pronunciation_dictionary_id": made.id, "version_id": made.version_id}
    resp = await fronts[1].post(
        "/v1/text-to-speech/joe", json={"text": "NASA", "pronunciation_dictionary_locators": [locator]}
    )
    answer = await resp.json()
    assert resp.status == 404 and answer["detail"]["code"] == "pronunciation_dictionary_not_found", answer
    listed = await b.pronunciation_dictionaries.list()
    assert made.id not in {d.id for d in listed.pronunciation_dictionaries}
    assert (await fronts[1].delete(f"{BASE}/{made.id}")).status == 404
    assert not {key for key in await bucket_keys(bucket) if made.id in key}  # its versions went too


@pytest.mark.stack
async def test_delete_needs_a_full_key(aiohttp_client, redis_url, data_dir, keys_table):
    settings = make_settings(redis_url, data_dir, auth_api_key="full-key-delete", auth_keys_table=keys_table)
    client = await aiohttp_client(create_app(settings))
    full = {"xi-api-key": "full-key-delete"}
    rule = {"type": "alias", "string_to_replace": "a", "alias": "b"}
    resp = await client.post(BASE + "/add-from-rules", json={"name": "kept", "rules": [rule]}, headers=full)
    made = await resp.json()
    resp = await client.post("/v1/tokens/ephemeral", json={"ttl_seconds": 60}, headers=full)
    bearer = {"Authorization": f"Bearer {(await resp.json())['token']}"}
    resp = await client.delete(f"{BASE}/{made['id']}", headers=bearer)
    assert resp.status == 401 and (await resp.json())["detail"]["code"] == "insufficient_scope"
    assert (await client.delete(f"{BASE}/{made['id']}")).status == 401
    assert (await client.get(f"{BASE}/{made['id']}", headers=full)).status == 200  # still there


# ----- bounded caches ----------------------------------------------------------------------------------------------


class CountingBackend(DirectoryBackend):
    """The real directory backend, counting its reads."""

    reads = 0

    async def get(self, key: str, limit: int) -> bytes | None:
        self.reads += 1
        return await super().get(key, limit)


@pytest.mark.unit
def test_the_byte_budget_cache_drops_the_least_recently_used():
    cache: ByteBudgetCache[str, str] = ByteBudgetCache(100)
    cache.put("a", "A", 40)
    cache.put("b", "B", 40)
    assert cache.get("a") == "A"  # now b is the least recently used
    cache.put("c", "C", 40)
    assert "b" not in cache and cache.get("a") == "A" and cache.get("c") == "C"
    assert cache.nbytes == 80
    cache.put("huge", "H", 101)  # larger than the whole budget: never kept
    assert "huge" not in cache and cache.nbytes == 80
    cache.drop(lambda key: key == "a")
    assert len(cache) == 1 and cache.nbytes == 40


@pytest.mark.unit
async def test_the_version_cache_holds_to_its_byte_budget(tmp_path):
    budget = 200_000
    store = DictionaryStore(DirectoryBackend(tmp_path), cache_bytes=budget)
    made = []
    for n in range(20):
        rules = [Rule(f"word{n}-{i}-" + "x" * 150, "alias", alias="y" * 150) for i in range(100)]
        made.append(await store.create(f"d{n}", None, rules, "default"))
    one = rules_bytes(made[0].rules)
    assert 40_000 < one < budget / 2  # about 50 KB: a few fit, twenty do not
    reader = DictionaryStore(DirectoryBackend(tmp_path), cache_bytes=budget)
    for dictionary in made:
        assert await reader.rules(dictionary.id, dictionary.version_id) == dictionary.rules
    assert reader._versions.nbytes <= budget and len(reader._versions) < len(made)


@pytest.mark.unit
async def test_unknown_ids_cost_one_read_per_ttl_and_bounded_memory(tmp_path):
    backend = CountingBackend(tmp_path)
    store = DictionaryStore(backend)
    for _ in range(50):
        assert await store.meta("nosuchdictionary") is None
    assert backend.reads == 1
    made = await store.create("real", None, [Rule("a", "alias", alias="b")], "default")
    backend.reads = 0
    for _ in range(50):
        assert await store.rules(made.id, "nosuchversion") is None
    assert backend.reads == 1
    for n in range(6_000):  # more than either cache holds entries
        await store.meta(f"unknown{n}")
        await store.rules(made.id, f"unknown{n}")
    assert store._latest.nbytes <= METAS_BUDGET and len(store._latest) <= METAS_BUDGET // 1024
    assert store._misses.nbytes <= MISSES_BUDGET and len(store._misses) <= MISSES_BUDGET // 1024
    assert await store.rules(made.id, made.version_id) == made.rules  # the real one still there


@pytest.mark.stack
async def test_a_version_past_its_largest_legal_size_is_not_downloaded(tmp_path, aws_endpoint):
    oversize = b'{"rules": [' + b" " * MAX_VERSION_BYTES + b"]}"
    bucket = await create_bucket()
    async with aioboto3.Session().client("s3") as s3:
        await s3.put_object(Bucket=bucket, Key="d/big/v1.json", Body=oversize)
    write_dictionary(tmp_path, "big", oversize)
    meta = (tmp_path / "dictionaries" / "big" / "meta.json").read_bytes()
    async with aioboto3.Session().client("s3") as s3:
        await s3.put_object(Bucket=bucket, Key="d/big/meta.json", Body=meta)
    s3_backend = BucketBackend(bucket, "d/")
    await s3_backend.open()
    try:
        counting = CountingBackend(tmp_path / "dictionaries")
        for backend in (counting, s3_backend):
            store = DictionaryStore(backend)
            for _ in range(3):  # then from memory: the refusal is remembered, not downloaded again
                with pytest.raises(DictionaryUnreadable, match="too large"):
                    await store.rules("big", "v1")
            assert store._versions.nbytes == 0
        assert counting.reads == 2  # meta.json and one attempt at the version
    finally:
        await s3_backend.close()
