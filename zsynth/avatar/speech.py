"""Speech tasks: text sent to the worker pool, and its audio cut into 20 ms frames with mouth cues."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from zsynth.avatar.visemes import REST, UNTIMED, VISEMES, openness, timing_labels
from zsynth.core.protocol import Event
from zsynth.services.synthesis import SynthesisRequest

OUTPUT_FORMAT: Final = "pcm_48000"  # the workers resample to the WebRTC rate, so no resampling happens here
SAMPLES_PER_FRAME: Final = 960  # 20 ms at 48 kHz: one WebRTC audio frame
_QUIET: Final = 0.08  # openness under which a frame shows a resting mouth whatever the phoneme


@dataclass(slots=True, eq=False)
class SpeechTask:
    """One ``speak`` command, from acceptance to its last played frame."""

    text: str
    voice_id: str
    client_id: str | None = None
    task_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    frames_fed: int = 0
    frames_played: int = 0
    feeding_done: bool = False
    started: bool = False
    finished: bool = False
    failed: bool = False

    @property
    def duration_ms(self) -> int:
        """Speech played so far."""
        return self.frames_played * 20

    @property
    def fully_played(self) -> bool:
        """Every frame fed has been played and no more will come."""
        return self.feeding_done and self.frames_played >= self.frames_fed

    def synthesis_request(self, session_id: str, workspace: str) -> SynthesisRequest:
        """What this task asks of the synthesis service, for a session acting in ``workspace``: realtime, with
        timing, its text spoken as written."""
        return SynthesisRequest(
            text=self.text,
            voice_id=self.voice_id,
            output_format=OUTPUT_FORMAT,
            request_id=session_id,
            workspace=workspace,
            options=None,
            alignment=True,
            priority="realtime",
        )


@dataclass(slots=True)
class AudioSlot:
    """One 20 ms frame of speech with its mouth cues and the task it belongs to."""

    pcm: npt.NDArray[np.int16]
    openness: float
    viseme: str
    task: SpeechTask | None = None


class Framer:
    """Cuts a job's chunk events into 20 ms :class:`AudioSlot` frames, keeping the remainder between chunks."""

    def __init__(self, task: SpeechTask) -> None:
        self.task = task
        self._pcm = np.zeros(0, dtype=np.int16)
        self._labels = np.zeros(0, dtype=np.int8)

    def push(self, event: Event) -> list[AudioSlot]:
        """Frames completed by one chunk event."""
        pcm = np.frombuffer(event.audio, dtype="<i2").astype(np.int16)
        labels = self._labels_for(event.meta, pcm.size)
        self._pcm = np.concatenate([self._pcm, pcm])
        self._labels = np.concatenate([self._labels, labels])
        return self._cut(final=False)

    def flush(self) -> list[AudioSlot]:
        """The last, zero-padded frame once the job is done."""
        return self._cut(final=True)

    @staticmethod
    def _labels_for(meta: dict[str, Any], size: int) -> npt.NDArray[np.int8]:
        timing = meta.get("timing")
        engine_samples = int(meta.get("samples") or 0)
        if isinstance(timing, list) and timing and engine_samples > 0:
            return timing_labels(timing, engine_samples, size)
        return np.full(size, UNTIMED, dtype=np.int8)

    def _cut(self, final: bool) -> list[AudioSlot]:
        count = self._pcm.size // SAMPLES_PER_FRAME
        if final and self._pcm.size % SAMPLES_PER_FRAME:
            pad = SAMPLES_PER_FRAME - self._pcm.size % SAMPLES_PER_FRAME
            self._pcm = np.concatenate([self._pcm, np.zeros(pad, dtype=np.int16)])
            self._labels = np.concatenate([self._labels, np.full(pad, UNTIMED, dtype=np.int8)])
            count += 1
        slots = []
        for i in range(count):
            lo, hi = i * SAMPLES_PER_FRAME, (i + 1) * SAMPLES_PER_FRAME
            pcm = self._pcm[lo:hi].copy()
            slots.append(AudioSlot(pcm, *mouth_cues(pcm, int(self._labels[lo + SAMPLES_PER_FRAME // 2])), self.task))
        cut = count * SAMPLES_PER_FRAME
        self._pcm, self._labels = self._pcm[cut:], self._labels[cut:]
        self.task.frames_fed += count
        return slots


def mouth_cues(pcm: npt.NDArray[np.int16], label: int) -> tuple[float, str]:
    """(openness, viseme) of one frame: the phoneme's shape when timed, else a shape chosen by loudness."""
    level = openness(pcm)
    if label != UNTIMED:
        shape = VISEMES[label]
        # Closed lips (P B M) show even when quiet; other shapes need sound behind them.
        return level, shape if (level >= _QUIET or shape == "A") else REST
    if level < _QUIET:
        return level, REST
    return level, "B" if level < 0.35 else ("C" if level < 0.7 else "D")
