"""LiveKit Agents' ElevenLabs TTS plugin as a voice agent drives it: connection options and one spoken turn."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np
from livekit.agents import APIConnectOptions
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT

# No retries, so a failed turn fails the test instead of being spoken again in a fresh context; a patient
# deadline, as the CPU engine shares this machine's cores with other test runs.
CONN = APIConnectOptions(max_retry=0, timeout=30.0)


@dataclass
class Turn:
    """What the agent's TTS stream handed back for one turn."""

    pcm: list[np.ndarray] = field(default_factory=list)
    words: list[tuple[str, float, float]] = field(default_factory=list)
    rate: int = 0

    def add(self, event) -> None:
        frame = event.frame
        self.rate = frame.sample_rate
        self.pcm.append(np.frombuffer(bytes(frame.data), dtype=np.int16).astype(np.float32) / 32768.0)
        for word in frame.userdata.get(USERDATA_TIMED_TRANSCRIPT) or []:
            self.words.append((str(word), float(word.start_time), float(word.end_time)))

    @property
    def samples(self) -> np.ndarray:
        return np.concatenate(self.pcm) if self.pcm else np.zeros(0, dtype=np.float32)

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.rate if self.rate else 0.0

    def check_words(self, text: str | None) -> None:
        """Word timestamps in order and inside the audio (and, for a whole turn, spelling its text)."""
        assert self.words, "no word timestamps"
        previous_end = 0.0
        for word, start, end in self.words:
            assert previous_end - 0.002 <= start <= end, (word, start, end, previous_end)
            previous_end = end
        assert previous_end <= self.seconds + 0.05, (previous_end, self.seconds)
        if text is not None:
            assert "".join(w for w, _, _ in self.words).split() == text.split()


async def speak(stream, pieces: list[str]) -> Turn:
    """Push ``pieces`` as an LLM would, end the input, and collect the turn's audio."""
    turn = Turn()

    async def feed() -> None:
        for piece in pieces:
            stream.push_text(piece)
            await asyncio.sleep(0.005)
        stream.end_input()

    feeder = asyncio.create_task(feed())
    async for event in stream:
        turn.add(event)
    await feeder
    return turn
