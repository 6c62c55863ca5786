"""Normalization, pronunciation dictionaries and break tags against the full local stack (real workers, Piper).

The official ``elevenlabs`` SDK manages dictionaries and names them in ``convert``; the socket's first message names
them as voice-agent frameworks send it. What is checked is what a user gets: decoded audio, its silences, and the
alignment on the characters the caller sent.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import aioboto3
import aiohttp
import numpy as np
import pytest
from elevenlabs import AsyncElevenLabs, PronunciationDictionaryVersionLocator
from elevenlabs.pronunciation_dictionaries import (
    BodyAddAPronunciationDictionaryV1PronunciationDictionariesAddFromRulesPostRulesItem_Alias as AliasRule,
)
from elevenlabs.pronunciation_dictionaries import (
    BodyAddAPronunciationDictionaryV1PronunciationDictionariesAddFromRulesPostRulesItem_Phoneme as PhonemeRule,
)
from livekit.plugins import elevenlabs as livekit_elevenlabs

from harness.audio import assert_speech, decode_audio
from harness.base import make_settings
from harness.fronts import clocked_app
from harness.s3 import create_bucket
from harness.ws import collect
from zsynth.speech.app import create_app

from .livekit_helpers import CONN
from .livekit_helpers import speak as livekit_speak

pytestmark = pytest.mark.stack

KEY = "sk-text-api-test"
FMT = "pcm_22050"
STEADY = {"stability": 1.0}  # the least random delivery: runs of one request differ by little
PLS = b"""<?xml version="1.0" encoding="UTF-8"?>
<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" xml:lang="en-US">
  <lexeme><grapheme>NASA</grapheme><alias>National Aeronautics and Space Administration</alias></lexeme>
  <lexeme><grapheme>tomato</grapheme><phoneme>t\xc9\x99\xcb\x88m\xc9\x91\xcb\x90to\xca\x8a</phoneme></lexeme>
</lexicon>
"""


@pytest.fixture
async def api_client(aiohttp_client, redis_url, data_dir, shared_workers, keys_table):
    settings = make_settings(redis_url, data_dir, auth_api_key=KEY, auth_keys_table=keys_table)
    return await aiohttp_client(clocked_app(settings))


def sdk(client) -> AsyncElevenLabs:
    return AsyncElevenLabs(base_url=str(client.make_url("")).rstrip("/"), api_key=KEY)


async def timestamps(client, text: str, **extra) -> tuple[np.ndarray, int, dict]:
    resp = await client.post(
        f"/v1/text-to-speech/any-voice/with-timestamps?output_format={FMT}",
        json={"text": text, "voice_settings": STEADY, **extra},
        headers={"xi-api-key": KEY},
    )
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    samples, rate = decode_audio(base64.b64decode(body["audio_base64"]), FMT)
    return samples, rate, body


def span(alignment: dict, text: str, part: str) -> tuple[float, float]:
    """When the characters of ``part`` (first occurrence in ``text``) start and end."""
    assert "".join(alignment["characters"]) == text
    first = text.index(part)
    last = first + len(part) - 1
    return alignment["character_start_times_seconds"][first], alignment["character_end_times_seconds"][last]


def longest_silence(samples: np.ndarray, rate: int) -> float:
    """The longest run of 10 ms frames below -50 dBFS, in seconds."""
    frame = rate // 100
    usable = len(samples) // frame * frame
    quiet = np.abs(samples[:usable].reshape(-1, frame)).max(axis=1) < 10 ** (-50 / 20)
    best = run = 0
    for flag in quiet:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best / 100.0


async def test_sdk_manages_dictionaries_and_convert_uses_them(api_client):
    api = sdk(api_client)
    made = await api.pronunciation_dictionaries.create_from_rules(
        name="brands", rules=[AliasRule(string_to_replace="zsynth", alias="zee synth")], description="ours"
    )
    assert made.version_rules_num == 1 and made.name == "brands"
    from_file = await api.pronunciation_dictionaries.create_from_file(name="lexicon", file=("l.pls", PLS))
    assert from_file.version_rules_num == 2
    listed = await api.pronunciation_dictionaries.list(page_size=100)
    ids = {d.id for d in listed.pronunciation_dictionaries}
    assert {made.id, from_file.id} <= ids
    got = await api.pronunciation_dictionaries.get(from_file.id)
    assert [r.string_to_replace for r in got.rules] == ["NASA", "tomato"]
    added = await api.pronunciation_dictionaries.rules.add(
        made.id, rules=[AliasRule(string_to_replace="ASAP", alias="as soon as possible")]
    )
    assert added.version_rules_num == 2 and added.version_id != made.version_id
    removed = await api.pronunciation_dictionaries.rules.remove(made.id, rule_strings=["zsynth"])
    assert removed.version_rules_num == 1
    current = await api.pronunciation_dictionaries.get(made.id)
    assert current.latest_version_id == removed.version_id
    assert [r.string_to_replace for r in current.rules] == ["ASAP"]
    pls = b"".join([chunk async for chunk in api.pronunciation_dictionaries.download(made.id, made.version_id)])
    assert b"<grapheme>zsynth</grapheme>" in pls and b"ASAP" not in pls  # the first version, as it was
    # convert names the lexicon: the alias makes the audio longer than the same request without it.
    text = "NASA launched it."
    locator = PronunciationDictionaryVersionLocator(pronunciation_dictionary_id=from_file.id, version_id=None)
    with_alias = b"".join(
        [
            c
            async for c in api.text_to_speech.convert(
                "any-voice", text=text, output_format=FMT, pronunciation_dictionary_locators=[locator]
            )
        ]
    )
    without = b"".join([c async for c in api.text_to_speech.convert("any-voice", text=text, output_format=FMT)])
    long_audio, rate = decode_audio(with_alias, FMT)
    short_audio, _ = decode_audio(without, FMT)
    assert_speech(long_audio, rate, "National Aeronautics and Space Administration launched it.")
    assert len(long_audio) / rate > len(short_audio) / rate + 1.0


async def test_alias_changes_what_is_heard_and_alignment_stays_on_the_callers_text(api_client):
    api = sdk(api_client)
    made = await api.pronunciation_dictionaries.create_from_rules(
        name="expand",
        rules=[
            AliasRule(
                string_to_replace="nasa", alias="National Aeronautics and Space Administration", case_sensitive=False
            )
        ],
    )
    text = "The NASA team waved."
    locators = [{"pronunciation_dictionary_id": made.id, "version_id": made.version_id}]
    plain, rate, plain_body = await timestamps(api_client, text)
    aliased, _, body = await timestamps(api_client, text, pronunciation_dictionary_locators=locators)
    assert len(aliased) / rate > len(plain) / rate + 1.0
    start, end = span(body["alignment"], text, "NASA")
    plain_start, plain_end = span(plain_body["alignment"], text, "NASA")
    assert end - start > (plain_end - plain_start) + 1.0  # the four letters now last as long as the alias
    assert (
        "".join(body["normalized_alignment"]["characters"])
        == "The National Aeronautics and Space Administration team waved."
    )
    # The words after it still follow it, inside the audio.
    after, _ = span(body["alignment"], text, "waved")
    assert end <= after + 0.01 and body["alignment"]["character_end_times_seconds"][-1] <= len(aliased) / rate + 0.1


async def test_normalization_on_and_off_give_different_audio_for_a_price(api_client):
    text = "The total is €1,250.75."
    words = "The total is one thousand, two hundred and fifty euros and seventy-five cents."
    on, rate, on_body = await timestamps(api_client, text, apply_text_normalization="on")
    off, _, off_body = await timestamps(api_client, text, apply_text_normalization="off")
    spelled, _, _ = await timestamps(api_client, words, apply_text_normalization="off")
    assert_speech(on, rate, words)
    assert "".join(on_body["normalized_alignment"]["characters"]) == words
    assert "".join(off_body["normalized_alignment"]["characters"]) == text
    # espeak's own reading of the amount is shorter; "on" is the spelled-out sentence (runs differ by < 0.1 s).
    assert len(on) / rate > len(off) / rate + 0.3, (len(on) / rate, len(off) / rate)
    assert abs(len(on) - len(spelled)) / rate < 0.2, (len(on) / rate, len(spelled) / rate)
    start, end = span(on_body["alignment"], text, "€1,250.75")
    assert end - start > 2.0  # the nine characters last as long as the words spoken for them


async def test_break_tag_adds_its_silence_and_alignment_keeps_counting(api_client):
    text = 'Hello there. <break time="1.5s" /> Goodbye now.'
    samples, rate, body = await timestamps(api_client, text)
    plain, _, _ = await timestamps(api_client, "Hello there. Goodbye now.")
    silence = longest_silence(samples, rate)
    assert 1.5 <= silence <= 1.5 + 0.5, silence
    assert longest_silence(plain, rate) < 0.8
    tag_start, tag_end = span(body["alignment"], text, '<break time="1.5s" />')
    assert tag_end - tag_start == pytest.approx(1.5, abs=0.1)
    goodbye, _ = span(body["alignment"], text, "Goodbye")
    assert goodbye >= tag_end - 0.01
    assert "".join(body["normalized_alignment"]["characters"]) == "Hello there.  Goodbye now."


async def test_socket_first_message_names_a_dictionary(api_client):
    api = sdk(api_client)
    made = await api.pronunciation_dictionaries.create_from_rules(
        name="socket",
        rules=[AliasRule(string_to_replace="NASA", alias="National Aeronautics and Space Administration")],
    )
    text = "NASA says hello."
    ws = await api_client.ws_connect(
        f"/v1/text-to-speech/any-voice/stream-input?output_format={FMT}&apply_text_normalization=on",
        headers={"xi-api-key": KEY},
    )
    await ws.send_json(
        {
            "text": " ",
            "voice_settings": STEADY,
            "pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": made.id, "version_id": None}],
        }
    )
    await ws.send_json({"text": text + " ", "flush": True})
    await ws.send_json({"text": ""})
    got = await collect(ws)
    assert got.errors == [] and got.close_code == 1000
    samples, rate = decode_audio(got.audio(), FMT)
    assert_speech(samples, rate, "National Aeronautics and Space Administration says hello.")
    assert got.chars() == text
    # A dictionary that does not exist ends the socket before anything is spoken.
    ws = await api_client.ws_connect("/v1/text-to-speech/any-voice/stream-input", headers={"xi-api-key": KEY})
    await ws.send_json({"text": " ", "pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": "nope"}]})
    got = await collect(ws)
    assert got.close_code == 1008 and got.errors[0]["error"] == "pronunciation_dictionary_not_found"


async def test_a_token_may_use_dictionaries_but_not_change_them(api_client):
    made = await sdk(api_client).pronunciation_dictionaries.create_from_rules(
        name="tokens", rules=[AliasRule(string_to_replace="ASAP", alias="as soon as possible")]
    )
    resp = await api_client.post("/v1/tokens/ephemeral", json={"ttl_seconds": 60}, headers={"xi-api-key": KEY})
    token = (await resp.json())["token"]
    bearer = {"Authorization": f"Bearer {token}"}
    resp = await api_client.post(
        "/v1/pronunciation-dictionaries/add-from-rules",
        json={"name": "x", "rules": [{"type": "alias", "string_to_replace": "a", "alias": "b"}]},
        headers=bearer,
    )
    assert resp.status == 401, await resp.text()  # the scope refusal every route answers with
    assert (await resp.json())["detail"]["code"] == "insufficient_scope"
    resp = await api_client.post(
        f"/v1/pronunciation-dictionaries/{made.id}/add-rules",
        json={"rules": [{"type": "alias", "string_to_replace": "x", "alias": "y"}]},
        headers=bearer,
    )
    assert resp.status == 401 and (await resp.json())["detail"]["code"] == "insufficient_scope"
    current = await sdk(api_client).pronunciation_dictionaries.get(made.id)
    assert current.latest_version_id == made.version_id  # the refused change made no new version
    resp = await api_client.post(
        f"/v1/text-to-speech/any-voice?output_format={FMT}",
        json={"text": "Reply ASAP.", "pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": made.id}]},
        headers=bearer,
    )
    assert resp.status == 200
    samples, rate = decode_audio(await resp.read(), FMT)
    assert_speech(samples, rate, "Reply as soon as possible.")


async def test_bad_locators_and_modes_get_clear_errors(api_client):
    cases: list[tuple[dict[str, object], int, str]] = [
        ({"apply_text_normalization": "always"}, 422, "invalid_parameters"),
        ({"pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": "a"}] * 4}, 422, "invalid_parameters"),
        ({"pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": "  "}]}, 422, "invalid_parameters"),
        (
            {"pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": "missing"}]},
            404,
            "pronunciation_dictionary_not_found",
        ),
    ]
    for extra, status, code in cases:
        resp = await api_client.post(
            "/v1/text-to-speech/any-voice", json={"text": "Hi.", **extra}, headers={"xi-api-key": KEY}
        )
        assert resp.status == status, await resp.text()
        assert (await resp.json())["detail"]["code"] == code
    resp = await api_client.post(
        "/v1/audio/speech",
        json={"input": "Hi.", "voice": "any", "apply_text_normalization": "sometimes"},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert resp.status == 422 and json.loads(await resp.text())["error"]["param"] == "apply_text_normalization"


async def test_dictionaries_live_in_the_bucket_and_every_front_uses_them(
    aiohttp_client, aws_endpoint, redis_url, shared_workers, tmp_path
):
    bucket = await create_bucket()
    fronts = [
        await aiohttp_client(create_app(make_settings(redis_url, tmp_path / name, voices_bucket=bucket)))
        for name in ("a", "b")
    ]
    made = await sdk(fronts[0]).pronunciation_dictionaries.create_from_rules(
        name="shared",
        rules=[AliasRule(string_to_replace="NASA", alias="National Aeronautics and Space Administration")],
    )
    async with aioboto3.Session().client("s3") as s3:
        listing = await s3.list_objects_v2(Bucket=bucket, Prefix="pronunciation-dictionaries/")
    keys = {obj["Key"] for obj in listing.get("Contents", [])}
    assert keys == {
        f"pronunciation-dictionaries/{made.id}/meta.json",
        f"pronunciation-dictionaries/{made.id}/{made.version_id}.json",
    }
    assert not (tmp_path / "a" / "dictionaries").exists()  # the bucket, not the disk
    # Front B (its own empty disk) lists it, changes it, and speaks with it.
    listed = await sdk(fronts[1]).pronunciation_dictionaries.list()
    assert made.id in {d.id for d in listed.pronunciation_dictionaries}
    text = "NASA waved."
    locators = [{"pronunciation_dictionary_id": made.id}]
    plain, rate, _ = await timestamps(fronts[1], text)
    aliased, _, body = await timestamps(fronts[1], text, pronunciation_dictionary_locators=locators)
    assert len(aliased) / rate > len(plain) / rate + 1.0
    assert "".join(body["normalized_alignment"]["characters"]).startswith("National Aeronautics")


async def test_phoneme_rules_are_spoken_from_their_phonemes_on_piper(api_client):
    api = sdk(api_client)
    long_ipa = "ɪkstɹˈɔːɹdɪnəɹi ɪkstɹˈɔːɹdɪnəɹi ɪkstɹˈɔːɹdɪnəɹi"
    made = await api.pronunciation_dictionaries.create_from_rules(
        name="phonemes",
        rules=[
            PhonemeRule(string_to_replace="Bob", phoneme=long_ipa, alphabet="ipa"),
            PhonemeRule(
                string_to_replace="Ann", phoneme="EH1 K S T R AH0 AO1 R D AH0 N EH2 R IY0 " * 3, alphabet="cmu-arpabet"
            ),
        ],
    )
    locators = [{"pronunciation_dictionary_id": made.id}]
    for text in ("Bob is here.", "Ann is here."):
        plain, rate, _ = await timestamps(api_client, text)
        spoken, _, body = await timestamps(api_client, text, pronunciation_dictionary_locators=locators)
        assert_speech(spoken, rate, "extraordinary extraordinary extraordinary is here.")
        assert len(spoken) / rate > len(plain) / rate + 1.0, (text, len(spoken) / rate, len(plain) / rate)
        assert "".join(body["alignment"]["characters"]) == text
        assert "".join(body["normalized_alignment"]["characters"]) == " is here."  # the phonemes are no text


async def test_break_tag_cut_by_the_socket_buffer_still_pauses(api_client):
    ws = await api_client.ws_connect(
        f"/v1/text-to-speech/any-voice/stream-input?output_format={FMT}", headers={"xi-api-key": KEY}
    )
    await ws.send_json({"text": " ", "voice_settings": STEADY, "generation_config": {"chunk_length_schedule": [50]}})
    # The first message passes the 50-character schedule inside the tag: the buffer releases up to "<break".
    first, second = "Please hold on while I look that up for you. <break ", 'time="2s" /> Thanks for waiting! '
    await ws.send_json({"text": first})
    await ws.send_json({"text": second})
    await ws.send_json({"text": ""})
    got = await collect(ws)
    assert got.errors == [] and got.close_code == 1000
    samples, rate = decode_audio(got.audio(), FMT)
    assert 2.0 <= longest_silence(samples, rate) <= 2.5
    assert got.chars() == (first + second).strip()
    assert_speech(samples, rate, "Please hold on while I look that up for you. Thanks for waiting!")


async def test_livekit_plugin_names_a_dictionary_per_context_and_gets_word_timestamps_on_its_text(api_client):
    made = await sdk(api_client).pronunciation_dictionaries.create_from_rules(
        name="livekit",
        rules=[AliasRule(string_to_replace="NASA", alias="National Aeronautics and Space Administration")],
    )
    text = "NASA paid $3.50 today."
    base_url = f"http://127.0.0.1:{api_client.server.port}/v1"
    seconds = {}
    options: dict[str, dict[str, Any]] = {
        "plain": {},
        "dictionary": {
            "pronunciation_dictionary_locators": [
                livekit_elevenlabs.PronunciationDictionaryLocator(made.id, made.version_id)
            ],
            "apply_text_normalization": "on",
        },
    }
    async with aiohttp.ClientSession() as session:
        for name, extra in options.items():
            tts = livekit_elevenlabs.TTS(
                api_key=KEY, voice_id="any-voice", base_url=base_url, http_session=session, **extra
            )
            turn = await livekit_speak(tts.stream(conn_options=CONN), [text])
            await tts.aclose()
            turn.check_words(text)  # the word timestamps spell the agent's own text
            seconds[name] = turn.seconds
    assert_speech(
        turn.samples, turn.rate, "National Aeronautics and Space Administration paid three dollars and fifty cents"
    )
    assert seconds["dictionary"] > seconds["plain"] + 1.0, seconds
