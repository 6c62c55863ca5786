"""Fair shares between owners: the queue serves keys in turn, realtime before batch within a turn, a cancelled job
leaves the queue at once, and a key's share is sized by the live workers."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from harness.base import make_settings
from harness.stores import redis_text
from zsynth.core import protocol
from zsynth.core.config import Settings
from zsynth.services.dispatch import Dispatcher, JobFailed
from zsynth.speech.app import create_app

pytestmark = pytest.mark.stack


@pytest.fixture
async def queue(private_redis_url: str, tmp_path: Path) -> AsyncIterator[tuple[Dispatcher, Redis]]:
    """A started dispatcher on a private database where no worker claims anything, and a client to look."""
    redis = Redis.from_url(private_redis_url)
    dispatcher = Dispatcher(Settings(data_dir=tmp_path).with_(redis_url=private_redis_url), redis)
    await dispatcher.start()
    try:
        yield dispatcher, redis
    finally:
        await dispatcher.close()
        await redis.aclose()


async def push(dispatcher: Dispatcher, name: str, owner: str, priority: protocol.Priority = "batch") -> None:
    """Queue a job whose text is its name, counted against ``owner`` (its share is given back at once)."""
    stream = await dispatcher.submit(protocol.Job(name, "v", "pcm_16000", priority=priority), owner=owner)
    await dispatcher.release(stream.job.job_id)


async def claim_order(redis: Redis) -> list[str]:
    """Take every queued job from the end workers claim from; their texts in that order."""
    names = []
    while (raw := await redis.rpop(protocol.QUEUE)) is not None:
        names.append(protocol.Job.from_json(redis_text(raw)).text)
    return names


@pytest.mark.parametrize("priority", ["realtime", "batch"])
async def test_another_keys_first_job_is_claimed_second_not_last(queue, priority):
    dispatcher, redis = queue
    for n in range(12):
        await push(dispatcher, f"a{n}", "key-a", priority)
    await push(dispatcher, "b0", "key-b", priority)
    order = await claim_order(redis)
    assert order == ["a0", "b0", *[f"a{n}" for n in range(1, 12)]]


async def test_owners_take_turns_and_each_keeps_its_own_order(queue):
    dispatcher, redis = queue
    for name, owner in [("a0", "A"), ("a1", "A"), ("a2", "A"), ("a3", "A"), ("b0", "B"), ("b1", "B"), ("c0", "C")]:
        await push(dispatcher, name, owner)
    assert await claim_order(redis) == ["a0", "b0", "c0", "a1", "b1", "a2", "a3"]


async def test_turns_follow_what_is_left_after_claims(queue):
    """Rounds are counted over the jobs still waiting: a key whose jobs were claimed gets its turn again."""
    dispatcher, redis = queue
    for n in range(4):
        await push(dispatcher, f"a{n}", "A", "realtime")
    await push(dispatcher, "b0", "B", "realtime")
    assert [await claim_order_one(redis) for _ in range(2)] == ["a0", "b0"]
    await push(dispatcher, "b1", "B", "realtime")  # B has nothing queued: its turn comes right after A's next
    assert await claim_order(redis) == ["a1", "b1", "a2", "a3"]


async def claim_order_one(redis: Redis) -> str:
    raw = await redis.rpop(protocol.QUEUE)
    assert raw is not None
    return protocol.Job.from_json(redis_text(raw)).text


async def test_realtime_still_goes_ahead_of_batch(queue):
    """Within one key every realtime job goes ahead of its batch jobs; across keys, realtime goes first within a
    round, so another key's realtime segment is not behind a key's batch jobs either."""
    dispatcher, redis = queue
    await push(dispatcher, "a-batch0", "A")
    await push(dispatcher, "a-batch1", "A")
    await push(dispatcher, "a-rt0", "A", "realtime")
    await push(dispatcher, "a-rt1", "A", "realtime")
    await push(dispatcher, "b-rt0", "B", "realtime")
    assert await claim_order(redis) == ["a-rt0", "b-rt0", "a-rt1", "a-batch0", "a-batch1"]


async def test_a_realtime_flood_does_not_starve_another_keys_batch_request(queue):
    """The issue's F4: one key's realtime contexts no longer go ahead of every other key's request."""
    dispatcher, redis = queue
    for n in range(10):
        await push(dispatcher, f"flood{n}", "flooder", "realtime")
    await push(dispatcher, "sentence", "other")
    assert (await claim_order(redis))[:3] == ["flood0", "sentence", "flood1"]


async def test_remainders_stay_last_and_a_job_written_by_another_encoder_is_still_placed(queue):
    """A remainder (pushed by a yield) waits behind fresh jobs; a job whose JSON does not lead with the owner (a
    reaper's re-encoding) is decoded and counts in its owner's turns all the same."""
    dispatcher, redis = queue
    remainder = protocol.Job("rest", "v", "pcm_16000", part=2, seq=5, owner="A")
    await redis.lpush(protocol.QUEUE, remainder.to_json())
    reencoded = protocol.Job("a0", "v", "pcm_16000", owner="A")
    fields = json.loads(reencoded.to_json())
    await redis.rpush(protocol.QUEUE, json.dumps(dict(reversed(list(fields.items())))))
    await push(dispatcher, "a1", "A")
    await push(dispatcher, "b0", "B")
    assert await claim_order(redis) == ["a0", "b0", "a1", "rest"]


async def test_a_cancelled_queued_job_leaves_the_queue_at_once(queue):
    dispatcher, redis = queue
    stream = await dispatcher.submit(protocol.Job("Nobody will hear this.", "v", "pcm_16000"), owner="A")
    other = await dispatcher.submit(protocol.Job("Still wanted.", "v", "pcm_16000"), owner="B")
    assert await redis.llen(protocol.QUEUE) == 2
    await stream.close()
    assert [protocol.Job.from_json(redis_text(raw)).text for raw in await redis.lrange(protocol.QUEUE, 0, -1)] == [
        "Still wanted."
    ]
    assert await redis.exists(protocol.cancel_key(stream.job.job_id))  # a worker that claimed it meanwhile skips it
    await other.close()
    assert await redis.llen(protocol.QUEUE) == 0


async def test_a_client_that_goes_away_while_queued_takes_its_job_off_the_queue(
    aiohttp_client, private_redis_url, tmp_path
):
    """No worker: the request waits in the queue; when its client hangs up, the queue is empty again."""
    client = await aiohttp_client(create_app(make_settings(private_redis_url, tmp_path)))
    redis = Redis.from_url(private_redis_url)
    try:
        request = asyncio.ensure_future(client.post("/v1/text-to-speech/v", json={"text": "Queued, then dropped."}))
        deadline = time.monotonic() + 10
        while not await redis.llen(protocol.QUEUE):
            assert time.monotonic() < deadline, "the job was never queued"
            await asyncio.sleep(0.02)
        request.cancel()  # the client closes its connection
        deadline = time.monotonic() + 5
        while await redis.llen(protocol.QUEUE):
            assert time.monotonic() < deadline, "the cancelled job is still queued"
            await asyncio.sleep(0.02)
    finally:
        await redis.aclose()


async def _beat(redis: Redis, worker_ids: list[str]) -> None:
    """Fresh heartbeats for these worker ids, as live workers write them (protocol.heartbeat_key)."""
    for worker_id in worker_ids:
        await redis.set(protocol.heartbeat_key(worker_id), json.dumps({"worker_id": worker_id}), ex=30)
        await redis.sadd(protocol.WORKERS, worker_id)


async def test_a_keys_share_is_sized_by_the_live_workers(private_redis_url, tmp_path):
    redis = Redis.from_url(private_redis_url)
    settings = make_settings(
        private_redis_url,
        tmp_path,
        jobs_credential_jobs_per_worker=2,
        jobs_credential_min_jobs=3,
        worker_heartbeat_interval_s=0.1,
        jobs_first_chunk_timeout_s=1.0,
    )
    dispatcher = Dispatcher(settings, redis)
    await dispatcher.start()
    try:
        assert dispatcher.share_limit == 3  # no live worker: the floor
        await _beat(redis, ["w1", "w2", "w3"])
        deadline = time.monotonic() + 5
        while dispatcher.share_limit != 6:
            assert time.monotonic() < deadline, dispatcher.share_limit
            await asyncio.sleep(0.05)
        streams = [await dispatcher.submit(protocol.Job(f"j{n}", "v", "pcm_16000"), owner="A") for n in range(6)]
        with pytest.raises(JobFailed) as full:
            await dispatcher.submit(protocol.Job("one too many", "v", "pcm_16000"), owner="A")
        assert full.value.code == "queue_full" and "already has 6 jobs" in full.value.message
        other = await dispatcher.submit(protocol.Job("another key", "v", "pcm_16000"), owner="B")
        # A realtime segment past the share waits for one of its key's own jobs to end rather than being refused.
        waiting = asyncio.ensure_future(dispatcher.wait_for_share("A", 5.0))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await streams[0].close()
        await asyncio.wait_for(waiting, 5)
        for stream in [*streams[1:], other]:
            await stream.close()
        assert await redis.llen(protocol.QUEUE) == 0  # every closed job left the queue
    finally:
        await dispatcher.close()
        await redis.aclose()


def test_the_queue_share_stays_the_ceiling(tmp_path):
    settings = Settings(data_dir=tmp_path).with_(
        redis_url="redis://127.0.0.1:1/0", jobs_max_queue=8, jobs_credential_queue_share=0.25
    )
    dispatcher = Dispatcher(settings, Redis.from_url(settings.redis.url))
    dispatcher.live_workers = 50
    assert dispatcher.share_limit == 2


async def test_a_long_realtime_segment_gives_way_to_another_keys_first_job_only(queue):
    """A running realtime segment yields between pieces to another key's fresh job (never to its own key's), and its
    remainder continues right after that turn, ahead of its key's later segments."""
    dispatcher, redis = queue
    should_yield = redis.register_script(protocol.SHOULD_YIELD_LUA)
    yield_slot = redis.register_script(protocol.YIELD_LUA)
    # Key A's long segment is claimed by a worker (still unfinished on the front: it counts in A's turns).
    held = await dispatcher.submit(protocol.Job("a long segment", "v", "pcm_16000", priority="realtime"), owner="A")
    running = held.job
    assert await redis.rpoplpush(protocol.QUEUE, "inflight") is not None
    a1 = await dispatcher.submit(protocol.Job("a1", "v", "pcm_16000", priority="realtime"), owner="A")
    assert await should_yield(keys=[protocol.QUEUE], args=["realtime", "A"]) == 0  # its own key's segment waits
    await push(dispatcher, "b0", "B")
    assert await claim_order_peek(redis) == "b0"  # another key's first job is next (its round 0)
    assert await should_yield(keys=[protocol.QUEUE], args=["realtime", "A"]) == 1
    remainder = dataclasses.replace(running, text="the rest", part=1, seq=4)
    claimed = await yield_slot(
        keys=[protocol.QUEUE, "inflight"], args=[running.to_json(), remainder.to_json(), "realtime"]
    )
    assert protocol.Job.from_json(claimed).text == "b0"
    assert await should_yield(keys=[protocol.QUEUE], args=["realtime", "B"]) == 0  # a remainder takes no turn
    await push(dispatcher, "c0", "C", "realtime")  # a third key's first segment: after A's remainder (round 0)
    await push(dispatcher, "a2", "A", "realtime")
    assert await claim_order(redis) == ["the rest", "c0", "a1", "a2"]
    await held.close()
    await a1.close()


async def claim_order_peek(redis: Redis) -> str:
    raw = await redis.lindex(protocol.QUEUE, -1)
    assert raw is not None
    return protocol.Job.from_json(redis_text(raw)).text


async def test_a_realtime_remainder_keeps_its_keys_turn_not_the_head(queue):
    """The remainder of a key's late segment (a high turn) waits behind another key's first job, yet goes ahead of
    its own key's later segments; and a running segment gives way to its own key's remainder of an earlier turn."""
    _, redis = queue
    yield_slot = redis.register_script(protocol.YIELD_LUA)
    should_yield = redis.register_script(protocol.SHOULD_YIELD_LUA)

    def job(name: str, owner: str, turn: int, part: int = 0) -> str:
        return protocol.Job(name, "v", "pcm_16000", priority="realtime", owner=owner, turn=turn, part=part).to_json()

    await redis.rpush(protocol.QUEUE, job("a6", "A", 6), job("b0", "B", 0), job("next", "C", 0))
    await redis.lpush("inflight", job("a5", "A", 5))
    remainder = job("a5 rest", "A", 5, part=1)
    claimed = await yield_slot(keys=[protocol.QUEUE, "inflight"], args=[job("a5", "A", 5), remainder, "realtime"])
    assert protocol.Job.from_json(claimed).text == "next"
    assert await claim_order_peek(redis) == "b0"
    # A worker running A's turn-7 segment gives way to the turn-5 remainder once it is next; not to A's turn-6 job.
    await redis.rpop(protocol.QUEUE)
    assert await claim_order_peek(redis) == "a5 rest"
    assert await should_yield(keys=[protocol.QUEUE], args=["realtime", "A", 7]) == 1
    assert await should_yield(keys=[protocol.QUEUE], args=["realtime", "A", 4]) == 0
    assert await claim_order(redis) == ["a5 rest", "a6"]
