"""Test helpers: start real services, decode what a user receives, and judge whether it is speech."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import redis
import soundfile as sf

from zsynth.core import protocol
from zsynth.core.audio import alaw_to_int16, parse_output_format, ulaw_to_int16
from zsynth.core.config import Settings
from zsynth.core.redis_link import sync_client

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on loopback nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_text(reply: object) -> str:
    """One reply of a Redis client opened without decode_responses (redis-py types it as bytes or str), as text."""
    assert isinstance(reply, bytes), f"expected bytes from Redis, got {reply!r}"
    return reply.decode()


def make_settings(redis_url: str, data_dir: Path, **overrides: Any) -> Settings:
    """Front settings for tests (short deadlines so failures surface quickly); ``overrides`` as Settings.with_ takes
    them (``ws_max_word_chars=``, ``jobs_max_queue=``)."""
    base = Settings(data_dir=data_dir).with_(
        redis_url=redis_url,
        jobs_first_chunk_timeout_s=20.0,
        jobs_chunk_timeout_s=10.0,
        # A worker run inside the test process shares that process's memory (torch, every engine the run loaded):
        # the engine's own ceiling would stop its jobs or end the whole test run. Tests of the ceiling set theirs.
        worker_max_rss=2**40,
    )
    return base.with_(**overrides)


def wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``predicate`` until true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class WorkerProcess:
    """A real ``zsynth worker`` child process (its log to ``log_path`` when given, else to the test's stderr), serving
    its own metrics on ``metrics_url``."""

    def __init__(
        self, redis_url: str, worker_id: str, data_dir: Path, *, log_path: str | None = None, **env: str
    ) -> None:
        self.redis_url = redis_url
        self.worker_id = worker_id
        self.metrics_port = int(env.get("ZSYNTH_WORKER_METRICS_PORT") or free_port())
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        full_env = dict(
            os.environ,
            ZSYNTH_REDIS_URL=redis_url,
            ZSYNTH_WORKER_ID=worker_id,
            ZSYNTH_DATA_DIR=str(data_dir),
            ZSYNTH_ENGINE_THREADS="1",
            ZSYNTH_HEARTBEAT_INTERVAL="0.5",
            ZSYNTH_HEARTBEAT_TTL="3",
            ZSYNTH_WORKER_METRICS_PORT=str(self.metrics_port),
            PYTHONUNBUFFERED="1",
        )
        full_env.update(env)
        with contextlib.ExitStack() as stack:  # the log file's copy here closes once the child holds its own
            log = stack.enter_context(Path(log_path).open("ab")) if log_path is not None else None
            self.proc = subprocess.Popen([sys.executable, "-m", "zsynth", "worker"], env=full_env, cwd=ROOT, stderr=log)

    def wait_ready(self, timeout: float = 60.0) -> WorkerProcess:
        """Block until the worker's heartbeat shows up."""
        client = sync_client(self.redis_url)
        key = protocol.heartbeat_key(self.worker_id)

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker {self.worker_id} exited with {self.proc.returncode}")
            return bool(client.exists(key))

        wait_for(ready, timeout, f"worker {self.worker_id} heartbeat")
        client.close()
        return self

    def kill(self) -> None:
        """SIGKILL: the worker dies without a word."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A Prometheus endpoint's samples, parsed by prometheus_client's own parser: (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample_sum(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(value for (found, have), value in samples.items() if found == name and wanted <= set(have))


class RedisServer:
    """A throw-away redis-server on a loopback port, which a test may stop and start again."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        """Start it and wait until it answers PING."""
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--databases",
                "64",
            ],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)

        def up() -> bool:
            with contextlib.suppress(redis.ConnectionError):
                return bool(client.ping())
            return False

        try:
            wait_for(up, 10, "redis-server")
        finally:
            client.close()
        return self

    def stop(self) -> None:
        """Stop it (its data is gone: persistence is off)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """Run a throw-away redis-server on a free loopback port; yield its URL."""
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.stop()


def moto_env(endpoint: str) -> dict[str, str]:
    """The AWS variables that point botocore (and so aioboto3, unpatched) at a moto server on ``endpoint``."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Run moto in server mode (DynamoDB and S3 compatible) on a free loopback port; yield its endpoint URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
        return False

    try:
        wait_for(up, 30, "moto server")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def zsynth_process(
    command: str, port: int, env: dict[str, str], timeout: float = 60.0, log_path: str | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """Run ``zsynth <command>`` (serve, avatar, demo) until its port answers; yield (process, base URL).

    A process that exits while starting fails at once with its exit code; on the way out it is asked to stop
    (SIGTERM, so it drains) and killed only if it does not. Its log goes to ``log_path`` when given.
    """
    with contextlib.ExitStack() as stack:  # the log file's copy here closes once the child holds its own
        log = stack.enter_context(Path(log_path).open("ab")) if log_path is not None else None
        proc = subprocess.Popen(
            [sys.executable, "-m", "zsynth", command], env={**os.environ, **env}, cwd=ROOT, stderr=log
        )

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"zsynth {command} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
        return False

    try:
        wait_for(up, timeout, f"zsynth {command}")
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def front_process(
    redis_url: str, data_dir: Path, *, log_path: str | None = None, **env: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """Run a real `zsynth serve` on a free port; yield (process, base URL). Its log goes to ``log_path`` if given."""
    port = free_port()
    env = {"ZSYNTH_REDIS_URL": redis_url, "ZSYNTH_PORT": str(port), "ZSYNTH_DATA_DIR": str(data_dir), **env}
    with zsynth_process("serve", port, env, timeout=30, log_path=log_path) as started:
        yield started


#: About 30 sentences: keeps a worker busy for a while (a job to kill, to wait behind, to yield).
LONG_TEXT = " ".join(f"This is sentence {n} of a long text that keeps the worker busy for a while." for n in range(30))


async def status_and_code(resp: Any) -> tuple[int, str]:
    """An error answer's HTTP status and its envelope's ``detail.code``."""
    return resp.status, (await resp.json())["detail"]["code"]


def decode_audio(data: bytes, output_format: str) -> tuple[np.ndarray, int]:
    """Decode bytes in an ElevenLabs output format to float32 mono samples and their rate."""
    fmt = parse_output_format(output_format, route="convert")
    if fmt.codec == "pcm":
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0, fmt.sample_rate
    if fmt.codec == "ulaw":
        return ulaw_to_int16(np.frombuffer(data, dtype=np.uint8)).astype(np.float32) / 32768.0, fmt.sample_rate
    if fmt.codec == "alaw":
        return alaw_to_int16(np.frombuffer(data, dtype=np.uint8)).astype(np.float32) / 32768.0, fmt.sample_rate
    samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    return samples[:, 0], int(rate)


def _frame_rms(samples: np.ndarray, rate: int) -> np.ndarray:
    """RMS level of each whole 20 ms frame."""
    frame = max(1, rate // 50)
    usable = len(samples) // frame * frame
    return np.asarray(np.sqrt((samples[:usable].reshape(-1, frame) ** 2).mean(axis=1)))


def voiced_fraction(samples: np.ndarray, rate: int) -> float:
    """Share of 20 ms frames whose RMS is over 0.02 (about -34 dBFS): frames that carry sound."""
    return _voiced(_frame_rms(samples, rate))


def _voiced(rms: np.ndarray) -> float:
    return float((rms > 0.02).mean()) if len(rms) else 0.0


def assert_speech(samples: np.ndarray, rate: int, text: str, min_voiced: float = 0.3) -> float:
    """Assert the audio is speech of plausible length for ``text``; return its duration in seconds.

    ``min_voiced`` is the share of 20 ms frames that must carry sound. 0.3 suits a sentence or more; a caller that
    knows what the same text sounds like alone (a soak) can set it from that.
    """
    duration = len(samples) / rate
    words = len(text.split())
    # Conversational English runs 2-4 words a second; allow a wide but failing-able band.
    assert words / 6.0 <= duration <= words / 1.0 + 1.5, f"{duration:.2f}s of audio for {words} words"
    rms = _frame_rms(samples, rate)
    voiced = _voiced(rms)
    assert voiced > min_voiced, f"only {voiced:.0%} of 20 ms frames carry sound: not speech"
    assert voiced < 0.995 or float(rms.std()) > 0.01, "no pauses and flat energy: not speech"
    return duration


class FakeClock:
    """A wall clock the test moves by hand (expiry and cache tests never sleep)."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds


async def socket_log_after_close(caplog: Any) -> list[str]:
    """The front's socket log lines once it has logged a socket's close (after its handler has finished)."""

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name.startswith("zsynth.speech.ws")]

    for _ in range(100):
        if any(" closed (" in line for line in lines()):
            break
        await asyncio.sleep(0.05)
    return lines()
