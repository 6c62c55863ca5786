"""pipecat's ElevenLabs TTS services, unchanged, in a real pipeline: run by ``tests/test_pipecat.py`` in the
separate virtual environment ``.venv-pipecat`` (pipecat-ai pins protobuf, soundfile and soxr below what zsynth's own
environment uses, so it cannot share ``.venv``).

    .venv-pipecat/bin/python tests/pipecat_client.py SERVICE BASE_URL KEY VOICE OUT_DIR [--idle S]

SERVICE is ``ws`` (``ElevenLabsTTSService``: multi-stream-input), ``http`` (``ElevenLabsHttpTTSService``:
``/stream/with-timestamps``) or ``dialogue`` (``ElevenLabsDialogueTTSService``: text-to-dialogue's
multi-stream-input). The pipeline is the service between a source that watches what flows back upstream (errors) and
a sink that keeps what comes down (audio, word timestamps). It speaks one turn, stays idle for ``--idle`` seconds
(longer than the services' 10 s keep-alive, so the keep-alive runs on an idle socket), speaks a second turn, and ends
the pipeline with an ``EndFrame``. Each turn's audio goes to ``OUT_DIR/turn-N.pcm`` (s16le mono) and a summary to
``OUT_DIR/summary.json``: the sample rate, each turn's words and errors. The test, in zsynth's environment, decodes
the audio and judges it. This file imports nothing of zsynth's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

TURNS = [
    "Hello! I am the assistant of this test. How can I help you today?",
    "Sure, the weather tomorrow looks sunny, with a light breeze in the afternoon.",
]
RATE = 24000
QUIET_S = 2.5  # a turn is over when its audio has started and nothing has come for this long
TURN_LIMIT_S = 60.0  # a patient bound: the CPU engine shares two cores with the rest of the test run


class Sink(FrameProcessor):  # type: ignore[misc]  # pipecat is not installed in .venv, which mypy reads
    """The end of the pipeline: keeps each turn's audio and the words the service pushed."""

    def __init__(self) -> None:
        super().__init__()
        self.turn = 0
        self.audio: dict[int, bytearray] = {}
        self.words: dict[int, list[str]] = {}
        self.last_audio = 0.0
        self.rate = 0

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.audio.setdefault(self.turn, bytearray()).extend(frame.audio)
            self.rate = frame.sample_rate
            self.last_audio = time.monotonic()
        elif isinstance(frame, TTSTextFrame):
            self.words.setdefault(self.turn, []).append(frame.text)
        await self.push_frame(frame, direction)


class Source(FrameProcessor):  # type: ignore[misc]  # as above
    """The head of the pipeline: keeps the errors the service sends upstream."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[str] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, ErrorFrame):
            self.errors.append(str(frame.error))
        await self.push_frame(frame, direction)


def make_service(kind: str, base: str, key: str, voice: str, session: aiohttp.ClientSession) -> Any:
    """The service as its users build it, pointed at zsynth instead of api.elevenlabs.io."""
    ws_base = base.replace("http://", "ws://", 1)
    if kind == "ws":
        from pipecat.services.elevenlabs.tts import ElevenLabsTTSService

        return ElevenLabsTTSService(
            api_key=key, url=ws_base, settings=ElevenLabsTTSService.Settings(voice=voice), sample_rate=RATE
        )
    if kind == "http":
        from pipecat.services.elevenlabs.tts import ElevenLabsHttpTTSService

        return ElevenLabsHttpTTSService(
            api_key=key,
            base_url=base,
            aiohttp_session=session,
            settings=ElevenLabsHttpTTSService.Settings(voice=voice),
            sample_rate=RATE,
        )
    from pipecat.services.elevenlabs.dialogue.tts import ElevenLabsDialogueTTSService

    return ElevenLabsDialogueTTSService(
        api_key=key, url=ws_base, settings=ElevenLabsDialogueTTSService.Settings(voice=voice), sample_rate=RATE
    )


async def wait_turn(sink: Sink, source: Source, turn: int) -> float:
    """Wait for turn ``turn``'s audio to start and then go quiet; return seconds to its first audio."""
    started = time.monotonic()
    first = None
    while time.monotonic() - started < TURN_LIMIT_S and not source.errors:
        await asyncio.sleep(0.05)
        if turn in sink.audio and first is None:
            first = time.monotonic() - started
        if first is not None and time.monotonic() - sink.last_audio > QUIET_S:
            break
    return first if first is not None else -1.0


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("service", choices=["ws", "http", "dialogue"])
    parser.add_argument("base")
    parser.add_argument("key")
    parser.add_argument("voice")
    parser.add_argument("out", type=Path)
    parser.add_argument("--idle", type=float, default=12.0, help="seconds between the turns (keep-alive: 10 s)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    async with aiohttp.ClientSession() as session:
        source, sink = Source(), Sink()
        service = make_service(args.service, args.base, args.key, args.voice, session)
        task = PipelineWorker(
            Pipeline([source, service, sink]),
            params=PipelineParams(audio_out_sample_rate=RATE),
            idle_timeout_secs=None,
        )
        runner = WorkerRunner(handle_sigint=False)
        run = asyncio.create_task(runner.run(task))
        firsts = []
        for index, text in enumerate(TURNS):
            if index:
                await asyncio.sleep(args.idle)  # the agent waits for its user; the keep-alive runs meanwhile
            sink.turn = index
            await task.queue_frame(TTSSpeakFrame(text))
            firsts.append(await wait_turn(sink, source, index))
        await task.queue_frame(EndFrame())
        await asyncio.wait_for(run, 30)

    for index, pcm in sink.audio.items():
        (args.out / f"turn-{index}.pcm").write_bytes(bytes(pcm))
    summary = {
        "service": args.service,
        "rate": sink.rate,
        "turns": TURNS,
        "first_audio_s": firsts,
        "words": {str(k): v for k, v in sink.words.items()},
        "errors": source.errors,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
