"""One clock, one queue of speech frames, and the two aiortc tracks that play them.

The audio track plays 20 ms frames of 48 kHz mono PCM; the video track shows 25 frames a second. Both sleep until
each frame's due time on the same absolute clock (``origin + n * period`` on ``time.monotonic()``), because aiortc's
senders send whatever ``recv()`` returns at once. The video frame for time T is drawn from the audio frames that
cover T, found in the same :class:`Playout`, so lips and sound come from one source of truth.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from fractions import Fraction
from typing import Final

import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame, VideoFrame

from zsynth.avatar.renderers.base import FrameCue, RenderStream
from zsynth.avatar.speech import SAMPLES_PER_FRAME, AudioSlot
from zsynth.avatar.visemes import REST

AUDIO_RATE: Final = 48_000
AUDIO_FRAME_S: Final = 0.020
VIDEO_FPS: Final = 25
AUDIO_PER_VIDEO: Final = 2  # audio frames per video frame (40 ms / 20 ms)
VIDEO_CLOCK: Final = 90_000
_SILENCE: Final = np.zeros(SAMPLES_PER_FRAME, dtype=np.int16)
_HISTORY: Final = 32  # played audio frames remembered for the video track


class Playout:
    """The session clock and the speech frames waiting to be played on it (audio frames, not text: character
    alignment is :class:`zsynth.core.alignment.Timeline`)."""

    def __init__(self) -> None:
        self.origin = time.monotonic()
        self.pending: deque[AudioSlot] = deque()
        self.played = -1  # index of the last audio frame handed to the audio track
        self._history: dict[int, AudioSlot | None] = {}

    def index_now(self) -> int:
        """The audio frame index due now."""
        return int((time.monotonic() - self.origin) / AUDIO_FRAME_S)

    def due(self, audio_index: int) -> float:
        """When audio frame ``audio_index`` should be sent (monotonic seconds)."""
        return self.origin + audio_index * AUDIO_FRAME_S

    @property
    def queued_s(self) -> float:
        """Seconds of speech waiting to be played."""
        return len(self.pending) * AUDIO_FRAME_S

    def take(self, index: int) -> AudioSlot | None:
        """Play audio frame ``index``: the next queued slot, or None (silence) when nothing waits."""
        slot = self.pending.popleft() if self.pending else None
        self.played = index
        self._history[index] = slot
        self._history.pop(index - _HISTORY, None)
        return slot

    def peek(self, index: int) -> AudioSlot | None:
        """The slot that was or will be played as audio frame ``index`` (None: silence or unknown)."""
        if index <= self.played:
            return self._history.get(index)
        ahead = index - self.played - 1
        return self.pending[ahead] if ahead < len(self.pending) else None

    def clear(self) -> None:
        """Drop every queued frame (an interrupt): the next audio frame is silence."""
        self.pending.clear()


class SpeechAudioTrack(MediaStreamTrack):
    """The audio track: queued speech, or silence so the clock keeps running."""

    kind = "audio"

    def __init__(self, timeline: Playout, on_play: Callable[[AudioSlot | None], None]) -> None:
        super().__init__()
        self.timeline = timeline
        self.on_play = on_play
        self._index: int | None = None
        self._pts = 0
        self.frames_sent = 0

    async def recv(self) -> AudioFrame:
        """The next 20 ms frame, no earlier than its due time."""
        if self.readyState != "live":
            raise MediaStreamError
        if self._index is None:
            self._index = self.timeline.index_now()
        wait = self.timeline.due(self._index) - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        if self.readyState != "live":
            raise MediaStreamError
        slot = self.timeline.take(self._index)
        self.on_play(slot)
        pcm = _SILENCE if slot is None else slot.pcm
        frame = AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = AUDIO_RATE
        frame.time_base = Fraction(1, AUDIO_RATE)
        # Timestamps stay contiguous even when the sender runs late, so the receiver never hears a gap.
        frame.pts = self._pts
        self._pts += SAMPLES_PER_FRAME
        self._index += 1
        self.frames_sent += 1
        return frame


class AvatarVideoTrack(MediaStreamTrack):
    """The video track: one rendered frame per 40 ms, showing the audio that plays at that moment."""

    kind = "video"

    def __init__(self, timeline: Playout, stream: RenderStream, is_talking: Callable[[], bool]) -> None:
        super().__init__()
        self.timeline = timeline
        self.stream = stream
        self.is_talking = is_talking
        self._index: int | None = None
        self.frames_sent = 0

    async def recv(self) -> VideoFrame:
        """The next frame, no earlier than its due time; late frames are skipped rather than sent in a burst."""
        if self.readyState != "live":
            raise MediaStreamError
        now_index = -(-self.timeline.index_now() // AUDIO_PER_VIDEO)
        if self._index is None or now_index - self._index > 2:
            self._index = now_index
        wait = self.timeline.due(self._index * AUDIO_PER_VIDEO) - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        if self.readyState != "live":
            raise MediaStreamError
        frame = await self.stream.render(self.cue(self._index))
        frame.time_base = Fraction(1, VIDEO_CLOCK)
        frame.pts = self._index * (VIDEO_CLOCK // VIDEO_FPS)
        self._index += 1
        self.frames_sent += 1
        return frame

    def cue(self, index: int) -> FrameCue:
        """Mouth cues for video frame ``index`` from the audio frames it covers (the loudest one leads)."""
        slots = [self.timeline.peek(index * AUDIO_PER_VIDEO + k) for k in range(AUDIO_PER_VIDEO)]
        voiced = [s for s in slots if s is not None]
        if not voiced:
            return FrameCue(index, index / VIDEO_FPS, self.is_talking(), REST, 0.0, np.zeros(0, dtype=np.int16))
        lead = max(voiced, key=lambda s: s.openness)
        pcm = np.concatenate([s.pcm if s is not None else _SILENCE for s in slots])
        return FrameCue(index, index / VIDEO_FPS, True, lead.viseme, lead.openness, pcm)
