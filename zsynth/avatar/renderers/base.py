"""The renderer interface: what the session gives a renderer for each video frame, and what it gets back.

A renderer owns one avatar's look. Each live session opens its own :class:`RenderStream` (blink timers, smoothing,
model state) and asks it for one frame per video tick. The cue carries both the derived mouth cues (viseme,
openness) and the raw 40 ms of speech the frame shows, so an audio-driven lip-sync model (a GPU renderer) can plug
in behind the same interface and ignore the cues.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
from aiohttp import web
from av import VideoFrame


@dataclass(frozen=True, slots=True)
class AvatarInfo:
    """What the management API says about an avatar."""

    avatar_id: str
    name: str
    renderer: str
    width: int
    height: int
    fps: int
    description: str = ""

    def as_json(self) -> dict[str, object]:
        """The avatar as listed by ``GET /v1/avatars``."""
        return {
            "avatar_id": self.avatar_id,
            "name": self.name,
            "renderer": self.renderer,
            "width": self.width,
            "height": self.height,
            "fps": self.fps,
            "description": self.description,
        }


@dataclass(frozen=True, slots=True)
class FrameCue:
    """Everything known about the moment one video frame shows."""

    index: int  # video frame number on the session clock
    time_s: float  # index / fps
    talking: bool  # a speech task is playing
    viseme: str  # Rhubarb letter (see zsynth.avatar.visemes)
    openness: float  # 0..1 from the loudness of the frame's audio
    pcm: npt.NDArray[np.int16]  # the speech this frame shows (48 kHz mono); zeros when silent


class RenderStream(ABC):
    """One session's renderer state."""

    @abstractmethod
    async def render(self, cue: FrameCue) -> VideoFrame:
        """The picture for ``cue`` (yuv420p or rgb24; the track stamps it); called once per video tick, in order."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook: a CPU stream holds nothing to release
        """Release per-session resources (a GPU renderer frees its slot here)."""


class AvatarRenderer(ABC):
    """One avatar: a look and a way of drawing it."""

    info: AvatarInfo

    @abstractmethod
    def open_stream(self, seed: int) -> RenderStream:
        """A fresh per-session stream; ``seed`` varies blinks and idle motion between sessions."""


# The avatar server's renderers by avatar id.
AVATARS: Final = web.AppKey("avatars", dict[str, AvatarRenderer])
