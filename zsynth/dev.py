"""``zsynth dev``: the whole stack on one box for a newcomer, stopped cleanly by Ctrl-C.

Starts a local ``redis-server`` when nothing answers at ZSYNTH_REDIS_URL (persistence off, loopback only), then
one front, the workers (``--workers``, else ZSYNTH_WORKERS, else :func:`~zsynth.core.config.default_workers`: one per
core for Piper, each using :func:`~zsynth.core.config.default_engine_threads` threads unless ZSYNTH_ENGINE_THREADS
says otherwise), the avatar server and the demo page as child processes. When any child
dies, or on Ctrl-C/SIGTERM, every child is stopped (SIGTERM, then SIGKILL after a grace period). With no keys
configured the servers are open (fine on loopback) and the demo page calls them without a token. The front also
answers Home Assistant's Wyoming protocol on :data:`DEV_WYOMING_URI` unless ZSYNTH_WYOMING_URI says otherwise (set
empty: no listener).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from urllib.parse import urlparse

import redis

from zsynth.core.config import Settings
from zsynth.core.redis_link import is_sentinel_url

logger = logging.getLogger(__name__)

GRACE_S = 10.0
# Where `zsynth dev` runs the Wyoming listener (the port Wyoming TTS servers use by convention).
DEV_WYOMING_URI = "tcp://127.0.0.1:10200"


def redis_answers(url: str) -> bool:
    """True when a Redis server answers PING at ``url``."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


def start_redis(url: str) -> subprocess.Popen[bytes]:
    """Start redis-server on the host and port of ``url``; raise if it is not installed or does not come up."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError(
            "redis-server is not installed: run ./scripts/dev (it installs it) or apt-get install redis-server"
        )
    parsed = urlparse(url)
    host = parsed.hostname or "127.0.0.1"
    port = parsed.port or 6379
    # A session of its own: Ctrl-C in the terminal signals the whole foreground group, and redis must outlive the
    # workers and fronts draining on it; run_dev stops it last.
    proc = subprocess.Popen(
        [exe, "--bind", host, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    for _ in range(100):
        if redis_answers(url):
            logger.info("started redis-server on %s:%d (pid %d)", host, port, proc.pid)
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"redis-server did not come up on {host}:{port}")


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def run_dev(settings: Settings, workers: int = 1) -> int:
    """Run the stack in the foreground; return the exit status."""
    children: list[subprocess.Popen[bytes]] = []
    services: list[subprocess.Popen[bytes]] = []
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        # A Sentinel-managed Redis is the operator's to run: dev starts a redis-server only for a plain URL.
        if not is_sentinel_url(settings.redis.url) and not redis_answers(settings.redis.url):
            services.append(start_redis(settings.redis.url))
        env = dict(os.environ, ZSYNTH_REDIS_URL=settings.redis.url)
        for index in range(workers):
            worker_env = dict(env, ZSYNTH_WORKER_ID=f"dev-{index}", ZSYNTH_WORKER_INDEX=str(index))
            children.append(subprocess.Popen([sys.executable, "-m", "zsynth", "worker"], env=worker_env))
        wyoming = os.environ.get("ZSYNTH_WYOMING_URI", DEV_WYOMING_URI)
        for command in ("serve", "avatar", "demo"):
            child_env = dict(env, ZSYNTH_WYOMING_URI=wyoming) if command == "serve" else env
            children.append(subprocess.Popen([sys.executable, "-m", "zsynth", command], env=child_env))
        host = settings.http.host if ":" not in settings.http.host else f"[{settings.http.host}]"
        scheme = "https" if settings.http.tls else "http"
        print(
            f"zsynth dev: API on {scheme}://{host}:{settings.http.port} with {workers} worker(s) of "
            f"{settings.engine_thread_count} engine thread(s), avatar server on "
            f"{scheme}://{host}:{settings.avatar.port}; open the demo at {scheme}://{host}:{settings.demo.port}/ "
            f"(Ctrl-C stops all){'; Home Assistant (Wyoming) on ' + wyoming if wyoming.strip() else ''}",
            file=sys.stderr,
        )
        while not stop:
            if any(child.poll() is not None for child in children):
                logger.error("a zsynth process exited; stopping the rest")
                return 1
            time.sleep(0.2)
        return 0
    except RuntimeError as err:
        print(f"zsynth dev: {err}", file=sys.stderr)
        return 1
    finally:
        _stop(children)
        _stop(services)
