"""Avatar renderers: the interface (base) and the built-in CPU renderer."""

from __future__ import annotations

from zsynth.avatar.renderers.base import AvatarInfo, AvatarRenderer, FrameCue, RenderStream
from zsynth.avatar.renderers.cpu import CpuFaceRenderer, FaceStyle, builtin_avatars

__all__ = [
    "AvatarInfo",
    "AvatarRenderer",
    "CpuFaceRenderer",
    "FaceStyle",
    "FrameCue",
    "RenderStream",
    "builtin_avatars",
]
