"""Shared fixtures: one real redis-server and two real Piper workers per test run, moto, private workers, ICE."""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import os
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis

from harness.base import make_settings
from harness.stores import moto_env, moto_server, redis_server
from harness.workers import WorkerProcess, stop_all
from zsynth.core.config import Settings
from zsynth.services.keystore import KeyStore
from zsynth.speech.app import create_app

SHARED_WORKERS = ("shared-0", "shared-1")
#: The test tiers (setup.cfg registers them); tests/README.md says which one a new test belongs to.
TIERS = frozenset({"unit", "stack", "heavy", "browser"})


#: Files are run heaviest tier first (their heaviest test's): the order the parallel pass hands files to its processes.
TIER_ORDER = {"heavy": 0, "browser": 1, "stack": 2, "unit": 3}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a collected test that carries no tier marker, or more than one: ``-m "unit or stack"`` must mean it.

    Then order the files by their heaviest tier, keeping each file's tests together and in their order. The parallel
    pass (``-n``, ``--dist loadfile``) hands whole files to its processes in this order, so the few files of minutes
    start first and the many short ones fill in behind them, rather than one long file starting last.
    """
    wrong = []
    rank: dict[str, int] = {}
    for item in items:
        tiers = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: {sorted(tiers) or 'no tier'}")
            continue
        path = item.nodeid.split("::", 1)[0]
        rank[path] = min(rank.get(path, len(TIER_ORDER)), TIER_ORDER[next(iter(tiers))])
    if wrong:
        raise pytest.UsageError(
            "every test carries exactly one tier marker (unit, stack, heavy or browser; tests/README.md):\n  "
            + "\n  ".join(wrong)
        )
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])  # stable: a file's tests keep their order


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real redis-server on a free loopback port, for the whole run (db 0 is the shared pool's)."""
    with redis_server() as url:
        yield url


@pytest.fixture(scope="session")
def aws_endpoint() -> Iterator[str]:
    """A real DynamoDB/S3-compatible server (moto's server mode) on loopback, for the whole run.

    aioboto3 reaches it unpatched through the standard AWS variables, which this fixture sets for the test process
    (and so for the worker processes it starts afterwards).
    """
    with moto_server() as url, pytest.MonkeyPatch.context() as mp:
        for name, value in moto_env(url).items():
            mp.setenv(name, value)
        yield url


@pytest.fixture(scope="session")
def keys_table(aws_endpoint: str) -> str:
    """A fresh portal keys table on the moto server, created on demand as `zsynth keys create` does."""
    name = f"zsynth-keys-{uuid.uuid4().hex[:8]}"

    async def create() -> None:
        store = KeyStore(name)
        await store.open()
        try:
            await store.ensure_table()
        finally:
            await store.close()

    asyncio.run(create())
    return name


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data directory the shared workers and fronts use."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="session")
def shared_workers(redis_url: str, data_dir: Path) -> Iterator[list[WorkerProcess]]:
    """Two real worker processes running the Piper engine, shared by the tests that do not kill workers."""
    workers = [WorkerProcess(redis_url, worker_id, data_dir) for worker_id in SHARED_WORKERS]
    try:
        for worker in workers:
            worker.wait_ready()
        yield workers
    finally:
        stop_all(workers)


# Private databases are flushed when their test ends, so they are handed out again in turn (the server has 64).
_next_db = itertools.cycle(range(1, 64))


@pytest.fixture
def private_redis_url(redis_url: str) -> Iterator[str]:
    """A Redis URL on a fresh database of the same server, for tests that run their own workers."""
    url = redis_url.rsplit("/", 1)[0] + f"/{next(_next_db)}"
    yield url
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()


@pytest.fixture
def private_worker(private_redis_url: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    """One real Piper worker of its own on the private database, for tests that kill or occupy it."""
    worker = WorkerProcess(private_redis_url, f"private-{time.monotonic_ns()}", tmp_path).wait_ready()
    yield worker
    worker.stop()


@pytest.fixture(scope="session")
def turbo_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight tiny Turbo checkpoint with the real file set (about 1.2 GB), built once for every Turbo test
    and the reduced GPU run (a build is about 15 s on two cores); nothing writes into it.

    Once per run, not per process: under pytest-xdist the first process to ask builds it in the directory all of
    them share (the parent of each one's base temp), holding a lock the others wait on, and marks it done.
    """
    # Imported in every process that asks (library chatter on import: pkg_resources, diffusers), built in one.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
        from workers.engines.turbo_ckpt import write_random_checkpoint  # torch: only the Turbo tests ask for this

        base = tmp_path_factory.getbasetemp()
        shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
        with (shared / "turbo-ckpt.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            built = shared / "turbo-ckpt.built"
            if not built.is_file():
                built.write_text(str(write_random_checkpoint(shared / "turbo-ckpt", "tiny")))
            return Path(built.read_text())


@pytest.fixture
def loopback_ice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both WebRTC peers gather 127.0.0.1 host candidates (aioice skips loopback otherwise)."""
    import aioice.ice  # WebRTC stays unloaded in the runs that need no peer

    from harness.avatar import loopback_host_addresses

    monkeypatch.setattr(aioice.ice, "get_host_addresses", loopback_host_addresses)


@pytest.fixture
def settings(redis_url: str, data_dir: Path, shared_workers: list[WorkerProcess]) -> Settings:
    """Settings of a front that talks to the shared workers."""
    return make_settings(redis_url, data_dir)


@pytest.fixture
async def client(aiohttp_client, settings: Settings):
    """A test client on the real application factory."""
    return await aiohttp_client(create_app(settings))


@pytest.fixture
async def aredis(redis_url: str) -> AsyncIterator[Redis]:
    """An async Redis client on the shared database."""
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()
