"""The avatar speaks through the server's one synthesis service, like every other transport: a clone this box lacks
is fetched from the voice library, an unknown voice id gets the swap-out voice, and its speech counts against the
owner's share of the queue (issue 37, item 2)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from harness import avatar as avatar_peer
from harness.audio import assert_speech
from harness.avatar import Viewer
from harness.base import make_settings
from harness.s3 import PREFIX, create_bucket, start_front
from harness.voice_clips import reference_file
from zsynth.avatar.app import create_avatar_app
from zsynth.core.voices.store import VoiceStore
from zsynth.services.auth import fingerprint
from zsynth.services.dispatch import DISPATCHER
from zsynth.services.synthesis import SYNTHESIS, SynthesisRequest

pytestmark = pytest.mark.stack

KEY = "avatar-voices-key"
HEADERS = {"X-Api-Key": KEY}


def _request(voice_id: str) -> SynthesisRequest:
    """What an avatar session asks of the service for one ``speak``."""
    return SynthesisRequest(
        text="Hello.",
        voice_id=voice_id,
        output_format="pcm_16000",
        request_id="t",
        workspace="default",
        options=None,
        priority="realtime",
    )


async def test_the_avatar_fetches_a_clone_its_box_lacks_and_swaps_out_unknown_ids(
    aiohttp_client, redis_url, tmp_path, aws_endpoint
):
    bucket = await create_bucket()
    speech = await start_front(aiohttp_client, redis_url, tmp_path / "box-a", bucket)
    form = aiohttp.FormData(default_to_multipart=True)
    form.add_field("name", "avatar clone")
    form.add_field("files", reference_file(), filename="ref.wav", content_type="audio/wav")
    resp = await speech.post("/v1/voices/add", data=form)
    assert resp.status == 200, await resp.text()
    clone_id = (await resp.json())["voice_id"]

    box_b = tmp_path / "box-b"  # another box: the clone was made on box A
    settings = make_settings(
        redis_url, box_b, auth_api_keys=(KEY,), voices_bucket=bucket, voices_prefix=PREFIX, voices_start_wait_s=1.0
    )
    avatar = await aiohttp_client(create_avatar_app(settings))
    service = avatar.app[SYNTHESIS]

    prepared = await service.build(_request(clone_id))
    assert prepared.job.voice_id == clone_id
    # Its voice library brought the clone to this box (at start, or on demand), so its workers can speak it.
    assert VoiceStore(settings.voices_dir).get(clone_id) is not None, "the clone never reached this box"
    assert (await service.build(_request("no-such-voice"))).job.voice_id == "joe"


@pytest.mark.usefixtures("loopback_ice")
async def test_an_avatar_session_speaks_an_unknown_voice_as_the_swap_out_one_within_its_keys_share(
    aiohttp_client, redis_url, data_dir, shared_workers
):
    settings = make_settings(redis_url, data_dir, auth_api_keys=(KEY,), avatar_connect_timeout_s=30.0)
    avatar = await aiohttp_client(create_avatar_app(settings))
    viewer = Viewer()
    _, control = await avatar_peer.open_session(avatar, viewer, HEADERS, voice_id="no-such-voice")
    owned = avatar.app[DISPATCHER]._owned
    text = "An unknown voice is spoken by the swap-out voice, as everywhere else."
    await control.ws.send_json({"type": "speak", "text": text})
    await control.next("speak.accepted")
    seen: set[str] = set()
    talking = asyncio.Event()

    async def watch() -> None:
        while not talking.is_set():
            seen.update(key for key, count in owned.items() if count)
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    await control.next("avatar.start_talking")
    talking.set()
    await watcher
    assert fingerprint(KEY) in seen, "the session's job did not count against its key's share"
    stop = await control.next("avatar.stop_talking")
    assert stop["interrupted"] is False
    await asyncio.sleep(0.5)
    spoken = viewer.audio_between(control.arrival("avatar.start_talking"), control.arrival("avatar.stop_talking") + 0.3)
    assert_speech(spoken, 48000, text)
    await control.ws.send_json({"type": "stop"})
    await viewer.close()
