#!/usr/bin/env python3
"""Chaos soak: a mixed load on a Sentinel-managed stack while its parts are killed on a schedule (issue 31).

Starts a Redis master with a replica and three sentinels (harness/sentinel.py), two Piper workers and two fronts on
loopback, all on the ``redis+sentinel://`` URL. For ``--minutes`` a few clients keep the mix of harness/bench/soak.py
going (HTTP streams, whole-body requests, realtime WebSocket turns, clone/delete cycles), each to a front picked at
random (on a refused connection the client tries the other front once, and that counts as an outage it saw). On a
schedule the soak SIGKILLs the Redis master (the old one is started again in the background and rejoins as a
replica), SIGKILLs a worker (respawned with the same worker id, as systemd would) and restarts a front (SIGTERM, then
started again on the same port); a worker or front that exits on its own is started again too, and reported. By
default the second worker and the second front are the victims, so the first of each runs through and its memory
can be judged from warm-up to the end (``--victims alternate`` spreads the faults).

It reports requests by kind and outcome (ok: all audio, and it is speech; failed: a clean error with status and
code; broken: a cut stream, a dropped socket, audio that is not speech or too short; hung: no end within the front's
deadlines plus 10 s), the longest outage a client saw (from a failure to the next first audio of a request that
succeeds), jobs claimed as part 0 more than once in the worker logs (re-runs, each with what its client heard) and ok
audio longer than 1.6x the same text spoken alone (spoken twice), the faults with their timings and the requests in
flight at each, the requests not ok in each fault's window (until the next fault), the job ends the fronts logged,
and each front's and worker's memory (RSS) sampled every minute with its growth after warm-up; then it judges the
targets. Logs of every process go to ``PATH.logs/``, the report to ``PATH.json`` and ``PATH.txt``.

    .venv/bin/python -m harness.bench chaos-soak --out /tmp/chaos/full        # 60 min: the targets of issue 31
    .venv/bin/python -m harness.bench chaos-soak --reduced --out /tmp/chaos/r # 3 min, a fault about every minute

``--plain`` gives the processes the master's plain ``redis://`` URL instead (a baseline: worker kills and front
restarts only, with ``--failover-every 0``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import errno
import json
import random
import re
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from harness.audio import assert_speech, decode_audio, voiced_fraction
from harness.base import free_port, wait_for
from harness.bench.soak import TEXTS, reference_clip
from harness.fronts import zsynth_process
from harness.sentinel import SentinelSet
from harness.workers import WorkerProcess
from zsynth.core.config import Settings

ROOT = Path(__file__).resolve().parents[2]

#: The request mix of harness/bench/soak.py: streams, whole bodies, realtime turns, clone/delete cycles.
KINDS = ["stream"] * 4 + ["convert"] * 3 + ["ws"] * 3 + ["clone"]
AUDIO_KINDS = ("stream", "convert", "ws")
FORMAT = "pcm_16000"
VOICE = "soak"  # no such voice: the swap-out voice speaks
_DEFAULTS = Settings()
#: A request with no end by then is hung: the front's first-chunk and chunk deadlines, plus 10 s.
HANG_S = _DEFAULTS.jobs.first_chunk_timeout_s + _DEFAULTS.jobs.chunk_timeout_s + 10
#: Audio this much longer than the same text spoken alone was (at least in part) spoken twice.
LONG_RATIO = 1.6
#: Audio this much shorter than the same text spoken alone lost a part.
SHORT_RATIO = 0.6
#: Audio whose share of frames that carry sound is under this ratio of the same text alone is not that speech.
#: (An absolute bar misjudges the shortest text: "A short sentence." alone has 27-37 % such frames, its leading
#: and trailing silence against 1.2 s of speech, and Piper's noise moves it from one rendering to the next.)
VOICED_RATIO = 0.6
#: The bar for the solo renderings themselves, before there is anything to compare with.
SOLO_MIN_VOICED = 0.15
CLAIMED = re.compile(r"\[job (\S+) worker (\S+)\] claimed \(\d+ chars, part (\d+),")
ENDED = re.compile(r"job (\S+) ended: (.*)$")
REQUEUED = re.compile(r"\[job (\S+) worker \S+\] queued again: ")  # a worker lost Redis, or a reaper put it back
SUBMITTED = re.compile(r"request (\w+): job (\w+) ")


class Failed(Exception):
    """A clean error answer: status and code."""


class Broken(Exception):
    """An end that is not a clean error: a cut stream, a dropped socket, audio that is not the speech asked for."""


@dataclass
class Request:
    """One client request and what became of it (times in seconds from the start of the load)."""

    kind: str
    text: int  # index into TEXTS
    front: int  # the front that served (or last refused) it
    start: float
    end: float | None = None
    first_byte: float | None = None
    outcome: str = ""  # ok, failed, broken, hung
    detail: str = ""
    audio_s: float | None = None
    voiced: float | None = None  # share of 20 ms frames that carry sound (audio kinds)
    request_id: str = ""  # the front's request-id header (HTTP kinds), which its log ties to the job id
    refused: list[float] = field(default_factory=list)  # when a front refused the connection (then the other)


@dataclass
class Fault:
    """One fault the soak caused: when, to what, how long recovery took."""

    kind: str  # failover, worker_kill, front_restart
    target: str
    at: float
    done: float | None = None
    detail: dict[str, float] = field(default_factory=dict)
    error: str = ""


@dataclass
class Series:
    """RSS samples (seconds, MiB) of one life of one process."""

    name: str
    pid: int
    samples: list[tuple[float, float]] = field(default_factory=list)
    ended: float | None = None  # when the soak killed or stopped this life


def refused(err: BaseException) -> bool:
    """Whether a connection error is a refusal (nobody listens on the port)."""
    if isinstance(err, aiohttp.ClientConnectorError):
        return isinstance(err.os_error, ConnectionRefusedError) or err.os_error.errno == errno.ECONNREFUSED
    return False


def rss_mib(pid: int) -> float | None:
    """VmRSS of a process in MiB, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


async def http_error(resp: aiohttp.ClientResponse) -> Failed:
    """An error answer as status and code (the ElevenLabs or OpenAI envelope's code, else the body's start)."""
    body = await resp.read()
    code = body[:60].decode(errors="replace")
    with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
        data = json.loads(body)
        inner = data.get("detail") or data.get("error") or {}
        code = str(inner.get("code") or inner.get("status") or code)
    return Failed(f"{resp.status} {code}")


class Stack:
    """The processes under test: a Sentinel set, two workers and two fronts, with their faults."""

    def __init__(self, logs: Path, data_dir: Path, plain: bool = False) -> None:
        self.logs = logs
        self.data_dir = data_dir
        self.plain = plain
        self.url = ""  # what fronts and workers get as ZSYNTH_REDIS_URL, once the set is up
        #: The clock of the report (seconds from the start of the load); the soak sets it.
        self.now: Callable[[], float] = time.monotonic
        self.redis = SentinelSet()
        self.front_ports = [free_port(), free_port()]
        self.bases = [f"http://127.0.0.1:{port}" for port in self.front_ports]
        self.workers: list[WorkerProcess] = []
        self.fronts: list[contextlib.ExitStack] = []
        self.front_procs: list[subprocess.Popen[bytes]] = []
        self.lives: Counter[str] = Counter()
        self.series: dict[str, Series] = {}

    # ----- lives -----------------------------------------------------------------------------------------------

    def _life(self, name: str, pid: int) -> Path:
        """Open a new life of ``name`` (a memory series of its own); return its log file."""
        life = self.lives[name] + 1
        key = f"{name} life {life}"
        self.series[key] = Series(key, pid)  # before the count: the sampler (another thread) reads the count first
        self.lives[name] = life
        return self.logs / f"{name}.life{life}.log"

    def _end_life(self, name: str) -> None:
        self.series[f"{name} life {self.lives[name]}"].ended = self.now()

    def start_worker(self, index: int) -> float:
        """Start worker ``index`` (a new life when it ran before) and wait for its ready line; return seconds."""
        started = time.monotonic()
        name = f"worker-{index}"
        log = self.logs / f"{name}.life{self.lives[name] + 1}.log"
        worker = WorkerProcess(self.url, name, self.data_dir, log_path=str(log))
        self._life(name, worker.proc.pid)
        if index < len(self.workers):
            self.workers[index] = worker  # before it is ready: a respawn that fails is seen by the watchdog
        else:
            self.workers.append(worker)

        def ready() -> bool:
            if worker.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {worker.proc.returncode} (see {log})")
            return f"worker {name} ready" in log.read_text(errors="replace")

        wait_for(ready, 120, f"{name} ready", 0.1)
        return time.monotonic() - started

    def start_front(self, index: int) -> float:
        """Start front ``index`` on its port and wait until it answers; return seconds."""
        started = time.monotonic()
        name = f"front-{index}"
        log = self.logs / f"{name}.life{self.lives[name] + 1}.log"
        env = {
            "ZSYNTH_REDIS_URL": self.url,
            "ZSYNTH_PORT": str(self.front_ports[index]),
            "ZSYNTH_DATA_DIR": str(self.data_dir),
            "ZSYNTH_LOG_LEVEL": "INFO",
        }
        stack = contextlib.ExitStack()
        proc, _ = stack.enter_context(
            zsynth_process("serve", self.front_ports[index], env, timeout=60, log_path=str(log))
        )
        self._life(name, proc.pid)
        if index < len(self.fronts):
            self.fronts[index], self.front_procs[index] = stack, proc
        else:
            self.fronts.append(stack)
            self.front_procs.append(proc)
        return time.monotonic() - started

    def start(self) -> None:
        """Bring everything up."""
        self.redis.start()
        self.url = self.redis.master_url() if self.plain else self.redis.url
        for index in range(2):
            self.start_worker(index)
        for index in range(2):
            self.start_front(index)

    def close(self) -> None:
        """Stop every process (fronts first, so they drain while workers still run)."""
        for index, stack in enumerate(self.fronts):
            with contextlib.suppress(Exception):
                stack.close()
            self._end_life(f"front-{index}")
        for index, worker in enumerate(self.workers):
            worker.stop()
            self._end_life(f"worker-{index}")
        self.redis.close()

    # ----- faults ----------------------------------------------------------------------------------------------

    def kill_master(self, fault: Fault) -> int:
        """SIGKILL the master and wait until the sentinels promote the replica; return the old master's port."""
        old = self.redis.kill_master()
        fault.target = f"redis master :{old}"
        fault.detail["promotion_s"] = round(self.redis.wait_promoted(old, timeout=60), 2)
        return old

    def rejoin(self, fault: Fault) -> None:
        """Start the killed master again; it rejoins as a replica (the next failover needs one)."""
        started = time.monotonic()
        try:
            self.redis.restart_killed()
        except Exception as err:  # noqa: BLE001 (reported with the failover; the next one may then fail)
            fault.error = f"old master did not rejoin: {type(err).__name__}: {err}"
            return
        fault.detail["rejoined_s"] = round(time.monotonic() - started, 2)

    def kill_worker(self, index: int, fault: Fault) -> None:
        """SIGKILL worker ``index`` and respawn it with the same worker id."""
        fault.target = f"worker-{index}"
        self.workers[index].kill()
        self._end_life(f"worker-{index}")
        fault.detail["respawn_s"] = round(self.start_worker(index), 2)

    def restart_front(self, index: int, fault: Fault) -> None:
        """SIGTERM front ``index`` (it drains), then start it again on the same port."""
        fault.target = f"front-{index}"
        started = time.monotonic()
        proc = self.front_procs[index]
        proc.terminate()
        try:
            proc.wait(_DEFAULTS.http.drain_timeout_s + 15)
        except subprocess.TimeoutExpired:
            fault.error = "did not stop after SIGTERM: killed"
            proc.kill()
        self.fronts[index].close()
        self._end_life(f"front-{index}")
        fault.detail["stop_s"] = round(time.monotonic() - started, 2)
        fault.detail["start_s"] = round(self.start_front(index), 2)

    def exited(self, name: str) -> int | None:
        """The exit code of process ``name`` (``worker-0``, ``front-1``) when it has exited, else None."""
        kind, index = name.split("-")
        proc = self.workers[int(index)].proc if kind == "worker" else self.front_procs[int(index)]
        return proc.poll()

    def respawn(self, name: str, fault: Fault) -> None:
        """Start a process that exited on its own again, as systemd would."""
        kind, index = name.split("-")
        self._end_life(name)
        if kind == "worker":
            fault.detail["respawn_s"] = round(self.start_worker(int(index)), 2)
        else:
            self.fronts[int(index)].close()
            fault.detail["respawn_s"] = round(self.start_front(int(index)), 2)

    def sample(self) -> None:
        """One RSS sample of every live front and worker."""
        t = self.now()
        for name, lives in self.lives.items():
            series = self.series[f"{name} life {lives}"]
            rss = rss_mib(series.pid)
            if rss is not None and series.ended is None:
                series.samples.append((round(t, 1), round(rss, 1)))


class Soak:
    """The load, the fault schedule and the memory sampler, run together for the duration."""

    def __init__(self, args: argparse.Namespace, stack: Stack, t0: float) -> None:
        self.args = args
        self.stack = stack
        self.t0 = t0
        self.clip = reference_clip()
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self.solo: dict[str, float] = {}
        self.solo_voiced: dict[str, float] = {}
        self.stop_at = 0.0
        self.busy: set[str] = set()  # processes being killed or started (the watchdog leaves them alone)

    def now(self) -> float:
        return time.monotonic() - self.t0

    # ----- one request -----------------------------------------------------------------------------------------

    def judge(self, req: Request, pcm: bytes) -> None:
        """Audio of an ok answer: speech for the text, and not much shorter or sparser than the same text alone."""
        samples, rate = decode_audio(pcm, FORMAT)
        req.audio_s = round(len(samples) / rate, 3)  # kept for a broken answer too: its length tells cut from odd
        req.voiced = round(voiced_fraction(samples, rate), 3)
        key = f"{req.kind}/{req.text}"
        alone = self.solo_voiced.get(key)
        min_voiced = VOICED_RATIO * alone if alone is not None else SOLO_MIN_VOICED
        try:
            assert_speech(samples, rate, TEXTS[req.text], min_voiced=min_voiced)
        except AssertionError as err:
            raise Broken(f"not speech ({req.audio_s:.2f} s, bar {min_voiced:.0%}): {err}") from None
        solo = self.solo.get(key)
        if solo is not None and req.audio_s < SHORT_RATIO * solo:
            raise Broken(f"short audio: {req.audio_s:.2f}s against {solo:.2f}s alone")

    async def attempt(self, session: aiohttp.ClientSession, base: str, req: Request) -> None:
        """Send ``req`` to the front at ``base``; return when it is ok, raise Failed or Broken otherwise."""
        if req.kind in ("stream", "convert"):
            self.judge(req, await self.http_audio(session, base, req))
        elif req.kind == "ws":
            self.judge(req, await self.ws_audio(session, base, req))
        else:
            await self.clone_cycle(session, base, req)

    async def http_audio(self, session: aiohttp.ClientSession, base: str, req: Request) -> bytes:
        """A stream or whole-body request: its audio."""
        path = "/stream" if req.kind == "stream" else ""
        url = f"{base}/v1/text-to-speech/{VOICE}{path}?output_format={FORMAT}"
        async with session.post(url, json={"text": TEXTS[req.text]}) as resp:
            req.request_id = resp.headers.get("request-id", "")
            if resp.status != 200:
                raise await http_error(resp)
            audio = bytearray()
            try:
                async for chunk in resp.content.iter_any():
                    req.first_byte = req.first_byte or round(self.now(), 3)
                    audio += chunk
            except aiohttp.ClientPayloadError as err:
                raise Broken(f"cut after {len(audio)} bytes: {type(err).__name__}") from None
        return bytes(audio)

    async def ws_audio(self, session: aiohttp.ClientSession, base: str, req: Request) -> bytes:
        """A realtime turn (the text word by word, then the end of input): its audio."""
        url = base.replace("http://", "ws://") + f"/v1/text-to-speech/{VOICE}/stream-input?output_format={FORMAT}"
        audio = bytearray()
        error = ""
        async with session.ws_connect(url) as ws:
            await ws.send_json({"text": " "})
            for word in TEXTS[req.text].split():
                await ws.send_json({"text": word + " ", "try_trigger_generation": True})
            await ws.send_json({"text": ""})
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                data = json.loads(msg.data)
                if data.get("error"):
                    error = str(data["error"])
                if data.get("audio"):
                    req.first_byte = req.first_byte or round(self.now(), 3)
                    audio += base64.b64decode(data["audio"])
            code = ws.close_code
        if error:
            raise Failed(f"ws {code} {error}")
        if code != 1000:
            raise Broken(f"ws closed {code} after {len(audio)} bytes")
        return bytes(audio)

    async def clone_cycle(self, session: aiohttp.ClientSession, base: str, req: Request) -> None:
        """Clone a voice, then delete it."""
        form = aiohttp.FormData()
        form.add_field("name", "chaos")
        form.add_field("file", self.clip, filename="ref.wav", content_type="audio/wav")
        async with session.post(f"{base}/voices", data=form) as resp:
            if resp.status != 200:
                raise await http_error(resp)
            voice_id = (await resp.json())["voice_id"]
            req.first_byte = round(self.now(), 3)
        async with session.delete(f"{base}/voices/{voice_id}") as resp:
            if resp.status != 200:
                raise Failed(f"delete: {await http_error(resp)}")

    async def send(self, session: aiohttp.ClientSession, req: Request) -> None:
        """``attempt`` on the chosen front; on a refused connection before any answer, once on the other."""
        try:
            await self.attempt(session, self.stack.bases[req.front], req)
        except aiohttp.ClientConnectorError as err:
            if not refused(err) or req.first_byte is not None:
                raise
            req.refused.append(round(self.now(), 3))
            req.front = 1 - req.front
            await self.attempt(session, self.stack.bases[req.front], req)

    async def one(self, session: aiohttp.ClientSession, kind: str, text: int, front: int) -> Request:
        """Run one request to its end (never past HANG_S) and record the outcome."""
        req = Request(kind, text, front, round(self.now(), 3))
        self.requests.append(req)
        try:
            await asyncio.wait_for(self.send(session, req), HANG_S)
            req.outcome = "ok"
        except Failed as err:
            req.outcome, req.detail = "failed", str(err)
        except Broken as err:
            req.outcome, req.detail = "broken", str(err)
        except aiohttp.ClientError as err:
            req.outcome, req.detail = "broken", f"{type(err).__name__}: {err}"[:160]
        except TimeoutError:
            req.outcome, req.detail = "hung", f"no end within {HANG_S:.0f}s"
        except Exception as err:  # noqa: BLE001 (whatever else ended it, the client did not get its audio)
            req.outcome, req.detail = "broken", f"{type(err).__name__}: {err}"[:160]
        req.end = round(self.now(), 3)
        return req

    # ----- the three loops -------------------------------------------------------------------------------------

    async def measure_solo(self, session: aiohttp.ClientSession) -> None:
        """Each text of each audio kind once, alone, on the first front: the durations to compare against."""
        for kind in AUDIO_KINDS:
            for text in range(len(TEXTS)):
                req = await self.one(session, kind, text, 0)
                if req.outcome != "ok" or req.audio_s is None:
                    raise RuntimeError(f"solo {kind} of text {text}: {req.outcome} {req.detail}")
                self.solo[f"{kind}/{text}"] = req.audio_s
                if req.voiced is not None:
                    self.solo_voiced[f"{kind}/{text}"] = req.voiced
        self.requests.clear()

    async def client(self, session: aiohttp.ClientSession) -> None:
        while self.now() < self.stop_at:
            req = await self.one(session, random.choice(KINDS), random.randrange(len(TEXTS)), random.randrange(2))
            if req.outcome != "ok":
                await asyncio.sleep(0.2)  # a front that fails fast must not turn a client into a busy loop

    def schedule(self) -> list[tuple[float, str]]:
        """(seconds, fault) for every fault of the run; none in the last stretch, so recovery is seen."""
        last = self.args.minutes * 60 - self.args.quiet_tail
        events = []
        for kind, every in (
            ("failover", self.args.failover_every),
            ("worker_kill", self.args.worker_kill_every),
            ("front_restart", self.args.front_restart_every),
        ):
            n = 1
            while every > 0 and n * every * 60 <= last:
                events.append((n * every * 60, kind))
                n += 1
        return sorted(events)

    async def chaos(self) -> None:
        """Cause the faults on schedule, one at a time (a late one waits for the one before)."""
        rejoin: asyncio.Task[None] | None = None
        victims: Counter[str] = Counter()
        for at, kind in self.schedule():
            await asyncio.sleep(max(0.0, at - self.now()))
            index = victims[kind] % 2 if self.args.victims == "alternate" else 1
            victims[kind] += 1
            if kind == "failover" and rejoin is not None:
                await rejoin  # the killed master must be a replica again before the next failover
            name = {"failover": "redis", "worker_kill": f"worker-{index}"}.get(kind, f"front-{index}")
            while name in self.busy:
                await asyncio.sleep(0.1)  # the watchdog is starting it again
            fault = Fault(kind, "", round(self.now(), 3))
            self.faults.append(fault)
            self.busy.add(name)
            try:
                if kind == "failover":
                    await asyncio.to_thread(self.stack.kill_master, fault)
                    rejoin = asyncio.create_task(asyncio.to_thread(self.stack.rejoin, fault))
                elif kind == "worker_kill":
                    await asyncio.to_thread(self.stack.kill_worker, index, fault)
                else:
                    await asyncio.to_thread(self.stack.restart_front, index, fault)
            except Exception as err:  # noqa: BLE001 (a fault that went wrong is reported; the soak goes on)
                fault.error = f"{type(err).__name__}: {err}"
            self.busy.discard(name)
            fault.done = round(self.now(), 3)
        if rejoin is not None:
            await rejoin

    async def watchdog(self) -> None:
        """Start again, as systemd would, any worker or front that exited without the soak killing it."""
        while self.now() < self.stop_at:
            for name in ("worker-0", "worker-1", "front-0", "front-1"):
                code = None if name in self.busy else self.stack.exited(name)
                if code is None:
                    continue
                fault = Fault("unplanned_exit", name, round(self.now(), 3), detail={"exit_code": code})
                self.faults.append(fault)
                self.busy.add(name)
                try:
                    await asyncio.to_thread(self.stack.respawn, name, fault)
                except Exception as err:  # noqa: BLE001 (reported; the next round tries again)
                    fault.error = f"{type(err).__name__}: {err}"
                self.busy.discard(name)
                fault.done = round(self.now(), 3)
            await asyncio.sleep(1.0)

    async def sampler(self) -> None:
        while self.now() < self.stop_at:
            self.stack.sample()
            await asyncio.sleep(min(self.args.sample_every, max(0.0, self.stop_at - self.now())))
        self.stack.sample()

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await self.measure_solo(session)
            self.t0 = time.monotonic()
            self.stop_at = self.args.minutes * 60
            chaos = asyncio.create_task(self.chaos())
            watchdog = asyncio.create_task(self.watchdog())
            await asyncio.gather(self.sampler(), *(self.client(session) for _ in range(self.args.clients)))
            await chaos
            await watchdog


# ----- the report ------------------------------------------------------------------------------------------------


def longest_outage(requests: list[Request]) -> tuple[float, float | None]:
    """The longest span from a failure a client saw (an error, a cut, a hang, a refused connection) to the next
    first byte of a request that then succeeded: (seconds, when it began)."""
    marks: list[tuple[float, bool]] = []
    for req in requests:
        marks += [(t, False) for t in req.refused]
        if req.outcome == "ok" and req.first_byte is not None:
            marks.append((req.first_byte, True))
        elif req.outcome != "ok" and req.end is not None:
            marks.append((req.end, False))
    best, began, opened = 0.0, None, None
    for t, ok in sorted(marks):
        if not ok and opened is None:
            opened = t
        elif ok and opened is not None:
            if t - opened > best:
                best, began = t - opened, opened
            opened = None
    if opened is not None and marks and marks[-1][0] - opened > best:
        best, began = marks[-1][0] - opened, opened
    return round(best, 2), began


def repeated_claims(logs: Path) -> dict[str, tuple[int, int]]:
    """Job ids claimed as part 0 more than once across every worker log: (claims, whole re-queues a worker logged
    because Redis was lost before the job's audio started; each explains one claim)."""
    claims: Counter[str] = Counter()
    requeued: Counter[str] = Counter()
    for path in sorted(logs.glob("worker-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            match = CLAIMED.search(line)
            if match and match.group(3) == "0":
                claims[match.group(1)] += 1
            match = REQUEUED.search(line)
            if match:
                requeued[match.group(1)] += 1
    return {job: (n, requeued[job]) for job, n in claims.items() if n > 1}


def job_requests(logs: Path) -> dict[str, str]:
    """Job id -> the front's request id, from the fronts' "request <id>: job <id>" lines."""
    jobs = {}
    for path in sorted(logs.glob("front-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            match = SUBMITTED.search(line)
            if match:
                jobs[match.group(2)] = match.group(1)
    return jobs


def repeated(requests: list[Request], solo: dict[str, float], logs: Path) -> list[dict[str, Any]]:
    """Jobs claimed as part 0 more than once, each with what its client got (when the logs tie it to a request):
    the outcome and the audio's length against the same text alone."""
    by_id = {r.request_id: r for r in requests if r.request_id}
    jobs = job_requests(logs)
    rows = []
    for job, (claims, requeues) in repeated_claims(logs).items():
        row: dict[str, Any] = {"job": job, "part0_claims": claims, "logged_requeues": requeues}
        req = by_id.get(jobs.get(job, ""))
        if req is not None:
            row.update(kind=req.kind, outcome=req.outcome, start=req.start, audio_s=req.audio_s)
            if req.audio_s is not None:
                row["x_solo"] = round(req.audio_s / solo[f"{req.kind}/{req.text}"], 2)
        rows.append(row)
    return rows


def job_ends(logs: Path) -> Counter[str]:
    """The fronts' "job <id> ended: <reason>" lines, counted by reason."""
    reasons: Counter[str] = Counter()
    for path in sorted(logs.glob("front-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            match = ENDED.search(line)
            if match:
                reasons[match.group(2).split(" (")[0].strip()[:80]] += 1
    return reasons


def memory(series: dict[str, Series], warmup: float, end: float) -> list[dict[str, Any]]:
    """Each series with its growth from the first sample at or after warm-up to its last, and whether a fault cut
    it (started after warm-up or ended before the end of the load)."""
    rows = []
    for s in series.values():
        after = [sample for sample in s.samples if sample[0] >= warmup]
        first_t = s.samples[0][0] if s.samples else None
        covers = bool(after) and first_t is not None and first_t <= warmup + 1 and after[-1][0] >= end - 1
        row: dict[str, Any] = {
            "series": s.name,
            "pid": s.pid,
            "first_sample_s": first_t,
            "ended_s": s.ended,
            "samples": s.samples,
            "covers_warmup_to_end": covers,
        }
        if after:
            row["rss_warmup_mib"], row["rss_last_mib"] = after[0][1], after[-1][1]
            row["growth_pct"] = round(100 * (after[-1][1] - after[0][1]) / after[0][1], 2)
        rows.append(row)
    return rows


def analyse(soak: Soak, logs: Path) -> dict[str, Any]:
    """Everything the report says, as JSON-ready data."""
    args, requests, faults = soak.args, soak.requests, soak.faults
    end = args.minutes * 60
    outcomes: Counter[str] = Counter(f"{r.kind} {r.outcome}" for r in requests)
    details: Counter[str] = Counter(f"{r.kind} {r.outcome}: {r.detail}" for r in requests if r.outcome != "ok")
    long_audio = [
        {"index": i, "kind": r.kind, "text": r.text, "audio_s": r.audio_s, "solo_s": soak.solo[f"{r.kind}/{r.text}"]}
        for i, r in enumerate(requests)
        if r.outcome == "ok" and r.audio_s is not None and r.audio_s > LONG_RATIO * soak.solo[f"{r.kind}/{r.text}"]
    ]
    claims = repeated(requests, soak.solo, logs)
    fault_rows = []
    for k, fault in enumerate(faults):
        following = faults[k + 1].at if k + 1 < len(faults) else float("inf")
        in_flight = [r for r in requests if r.start <= fault.at < (r.end or float("inf"))]
        overlapped = [r for r in requests if r.start <= (fault.done or fault.at) and (r.end or end) >= fault.at]
        # A request that did not end ok belongs to the last fault before its end (its window).
        failed = [r for r in requests if r.outcome != "ok" and r.end is not None and fault.at <= r.end < following]
        fault_rows.append(
            {
                **asdict(fault),
                "in_flight_at_fault": len(in_flight),
                "overlapping_requests": len(overlapped),
                "not_ok_in_window": len(failed),
                "not_ok_in_window_by_outcome": dict(Counter(r.outcome for r in failed)),
                "within_target": len(failed) <= len(in_flight),
            }
        )
    first = faults[0].at if faults else float("inf")
    before_faults = sum(1 for r in requests if r.outcome != "ok" and r.end is not None and r.end < first)
    outage, outage_at = longest_outage(requests)
    rows = memory(soak.stack.series, args.warmup * 60, end)
    judged = [row for row in rows if row["covers_warmup_to_end"] and "growth_pct" in row]
    hung = sum(1 for r in requests if r.outcome == "hung")
    targets: dict[str, bool | None] = {  # None: not judged (nothing to judge it on)
        "hung requests = 0": hung == 0,
        # A job claimed as part 0 again is a re-run: by design when no audio had gone out (the reaper queues such a
        # job once more). What the client heard decides whether it was spoken twice.
        "jobs spoken twice = 0 (ok audio over 1.6x the same text alone, re-runs included)": not long_audio
        and not [row for row in claims if row.get("x_solo", 0) > LONG_RATIO],
        "not ok per fault window <= requests in flight at the fault": all(row["within_target"] for row in fault_rows)
        and before_faults == 0,
        "front and worker RSS growth after warm-up <= 5 % (series that cover warm-up to end)": all(
            row["growth_pct"] <= 5.0 for row in judged
        )
        if judged
        else None,
    }
    return {
        "settings": {**vars(args), "hang_s": HANG_S, "long_ratio": LONG_RATIO, "short_ratio": SHORT_RATIO},
        "requests": len(requests),
        "outcomes": dict(sorted(outcomes.items())),
        "not_ok_details": dict(details.most_common()),
        "hung": hung,
        "refused_connections": sum(len(r.refused) for r in requests),
        "longest_outage_s": outage,
        "longest_outage_began_s": outage_at,
        "repeated_part0_claims": claims,
        "long_audio": long_audio,
        "solo_durations_s": soak.solo,
        "solo_voiced": soak.solo_voiced,
        "faults": fault_rows,
        "not_ok_before_first_fault": before_faults,
        "front_job_ends": dict(job_ends(logs).most_common()),
        "memory": rows,
        "targets": targets,
        "memory_judged_on": [row["series"] for row in judged],
        "request_log": [asdict(r) for r in requests],
    }


def text_report(report: dict[str, Any]) -> str:
    """The report for people."""
    s = report["settings"]
    end = s["minutes"] * 60
    lines = [
        f"chaos soak: {s['minutes']:g} min, {s['clients']} clients, 2 workers, 2 fronts, Sentinel (master+replica+3)",
        f"faults: failover every {s['failover_every']:g} min, worker kill every {s['worker_kill_every']:g} min, "
        f"front restart every {s['front_restart_every']:g} min (victims: {s['victims']}); warm-up {s['warmup']:g} min",
        f"hung = no end within {s['hang_s']:.0f}s (front first-chunk + chunk deadlines + 10 s)",
        "",
        f"requests: {report['requests']}",
    ]
    lines += [f"  {key:<22} {n}" for key, n in report["outcomes"].items()]
    if report["not_ok_details"]:
        lines.append("not ok, by detail:")
        lines += [f"  {n:>4}  {key}" for key, n in report["not_ok_details"].items()]
    began = report["longest_outage_began_s"]
    lines += [
        f"refused connections (retried on the other front): {report['refused_connections']}",
        f"longest outage seen by a client: {report['longest_outage_s']:.1f}s"
        + (f" (from t={began:.0f}s)" if began is not None else ""),
        "jobs claimed as part 0 more than once (re-runs: harmless when no audio had gone out, which a logged re-queue "
        "or the client's audio length tells; a dead worker's re-queued jobs are not logged, realtime turns not tied to "
        f"their job): {len(report['repeated_part0_claims'])}",
        *(f"  {row}" for row in report["repeated_part0_claims"]),
        f"ok audio over {LONG_RATIO}x its solo duration: {len(report['long_audio']) or 'none'}",
        *(f"  {row}" for row in report["long_audio"]),
        "",
        "faults:  t(s)  kind           target               took(s)  details                       "
        "in flight  not ok in window",
    ]
    for f in report["faults"]:
        took = (f["done"] or f["at"]) - f["at"]
        detail = ", ".join(f"{k} {v}" for k, v in f["detail"].items()) + (f" ERROR {f['error']}" if f["error"] else "")
        lines.append(
            f"  {f['at']:>10.0f}  {f['kind']:<14} {f['target']:<20} {took:>7.1f}  {detail:<30} "
            f"{f['in_flight_at_fault']:>9}  {f['not_ok_in_window']:>3} {f['not_ok_in_window_by_outcome'] or ''}"
        )
    promotions = [f["detail"]["promotion_s"] for f in report["faults"] if "promotion_s" in f["detail"]]
    counts = Counter(f["kind"] for f in report["faults"])
    lines += [
        f"  {counts['failover']} failovers (promotion {', '.join(f'{p:.1f}s' for p in promotions) or '-'}), "
        f"{counts['worker_kill']} worker kills, {counts['front_restart']} front restarts, "
        f"{counts['unplanned_exit']} processes that exited on their own (started again); "
        f"not ok before the first fault: {report['not_ok_before_first_fault']}",
        "",
        "front job ends: " + (", ".join(f"{k}: {n}" for k, n in report["front_job_ends"].items()) or "none logged"),
        "",
        "memory (RSS MiB):  series               warm-up    last   growth  covers warm-up..end",
    ]
    for row in report["memory"]:
        growth = f"{row['growth_pct']:>6.1f}%" if "growth_pct" in row else "      -"
        warm = f"{row['rss_warmup_mib']:>7.1f}  {row['rss_last_mib']:>7.1f}" if "growth_pct" in row else " " * 16
        if row["covers_warmup_to_end"]:
            cut = "yes"
        elif row["first_sample_s"] is None:
            cut = "no: never sampled"
        else:
            cut = f"no: sampled from t={row['first_sample_s']:.0f}s" + (
                f", ended t={row['ended_s']:.0f}s" if row["ended_s"] is not None and row["ended_s"] < end - 1 else ""
            )
        lines.append(f"  {row['series']:<34} {warm}  {growth}  {cut}")
    lines += ["", "targets:"]
    verdicts = {True: "PASS", False: "FAIL", None: "N/A "}
    lines += [f"  {verdicts[ok]}  {name}" for name, ok in report["targets"].items()]
    lines.append(f"  (memory judged on: {', '.join(report['memory_judged_on']) or 'no series covers warm-up to end'})")
    return "\n".join(lines) + "\n"


#: The fault and sampling defaults of the full run, and of ``--reduced`` (3 min with a fault about every minute);
#: a flag given wins over either.
FULL = {
    "minutes": 60.0,
    "failover_every": 10.0,
    "worker_kill_every": 7.0,
    "front_restart_every": 13.0,
    "warmup": 10.0,
    "sample_every": 60.0,
    "quiet_tail": 30.0,
}
REDUCED = {
    "minutes": 3.0,
    "failover_every": 1.0,
    "worker_kill_every": 0.75,
    "front_restart_every": 1.1,
    "warmup": 1.0,
    "sample_every": 15.0,
    "quiet_tail": 15.0,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The soak's options (the timing ones default by ``--reduced``: FULL or REDUCED)."""
    parser.add_argument("--minutes", type=float, help="length of the load (default 60)")
    parser.add_argument("--failover-every", type=float, help="minutes between master kills (0: none; default 10)")
    parser.add_argument("--worker-kill-every", type=float, help="minutes between worker SIGKILLs (default 7)")
    parser.add_argument("--front-restart-every", type=float, help="minutes between front restarts (default 13)")
    parser.add_argument("--warmup", type=float, help="minutes before the memory baseline (default 10)")
    parser.add_argument("--sample-every", type=float, help="seconds between RSS samples (default 60)")
    parser.add_argument("--quiet-tail", type=float, help="seconds at the end without faults (default 30)")
    parser.add_argument("--clients", type=int, default=3, help="concurrent clients (the box has 2 cores)")
    parser.add_argument("--victims", choices=["second", "alternate"], default="second")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--plain",
        action="store_true",
        help="give fronts and workers the master's plain redis:// URL (a baseline; no failover survives it)",
    )
    parser.add_argument("--reduced", action="store_true", help="3 min with a fault about every minute")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "zsynth-chaos" / "report")


def bench(args: argparse.Namespace) -> dict[str, Any]:
    """Run the chaos soak, write PATH.json and PATH.txt, print the text report."""
    for name, value in (REDUCED if args.reduced else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    random.seed(args.seed)
    out: Path = args.out
    logs = out.with_name(out.name + ".logs")
    logs.mkdir(parents=True, exist_ok=True)
    for old in logs.glob("*.log"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix="zsynth-chaos-") as tmp:
        stack = Stack(logs, Path(tmp), plain=args.plain)
        soak = Soak(args, stack, time.monotonic())
        stack.now = soak.now
        try:
            stack.start()
            print(f"chaos soak: stack up (logs in {logs}); {args.minutes:g} min of load from now", flush=True)
            asyncio.run(soak.run())
        finally:
            stack.close()
    report = analyse(soak, logs)
    out.with_name(out.name + ".json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    text = text_report(report)
    out.with_name(out.name + ".txt").write_text(text)
    print(text, end="")
    return report
