"""The default renderer: a 2D cartoon face drawn with numpy, no third-party art.

The portrait is drawn once per avatar without eyes and mouth. Mouth patches (one per viseme and openness step) and
eye patches (per blink step and gaze) are drawn on demand onto crops of that portrait and cached, so a frame costs
one portrait copy and two small pastes: well under a millisecond at 512 x 512, leaving the CPU to the video encoder.
Everything is kept as I420 (YUV 4:2:0) planes, the encoders' own format: converting each RGB frame would cost more
than drawing it (about 2.6 ms of a 6 ms frame at 512 x 512).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
from av import VideoFrame

from zsynth.avatar.renderers.base import AvatarInfo, AvatarRenderer, FrameCue, RenderStream
from zsynth.avatar.visemes import VISEMES

Color = tuple[int, int, int]
FloatImage = npt.NDArray[np.float32]
Image = npt.NDArray[np.uint8]
Planes = tuple[Image, Image, Image]  # Y at full resolution, U and V at half width and height

_MARGIN: Final = 4  # spare rows above and below for the breathing motion (even, like every offset: 4:2:0 chroma)
_OPEN_STEPS: Final = 4  # openness is quantised to this many mouth drawings per viseme
_BLINK: Final = (1, 2, 2, 1)  # eyelid steps of one blink, one per video frame (0 open, 2 closed)
_MOUTH: Final = (0.37, 0.575, 0.63, 0.725)  # x0, y0, x1, y1 of the mouth patch, as fractions of the size
_EYES: Final = (0.31, 0.385, 0.69, 0.475)
_LIP: Final[Color] = (176, 84, 88)
_INSIDE: Final[Color] = (58, 22, 30)
_TEETH: Final[Color] = (246, 244, 236)
_TONGUE: Final[Color] = (204, 96, 104)


@dataclass(frozen=True, slots=True)
class FaceStyle:
    """The colours that make one built-in avatar."""

    skin: Color
    hair: Color
    iris: Color
    shirt: Color
    background: tuple[Color, Color]
    long_hair: bool = False


# Mouth geometry per viseme, in fractions of the size: half width, closed opening, extra opening when loud,
# and which of upper teeth / lower teeth / tongue show.
_SHAPES: Final[dict[str, tuple[float, float, float, bool, bool, bool]]] = {
    "X": (0.062, 0.0, 0.0, False, False, False),
    "A": (0.056, 0.0, 0.0, False, False, False),
    "B": (0.066, 0.010, 0.006, True, True, False),
    "C": (0.064, 0.016, 0.026, True, False, False),
    "D": (0.070, 0.024, 0.032, True, False, True),
    "E": (0.052, 0.016, 0.020, True, False, False),
    "F": (0.034, 0.014, 0.010, False, False, False),
    "G": (0.062, 0.010, 0.002, True, False, False),
    "H": (0.064, 0.020, 0.022, True, False, True),
}


def _grid(h: int, w: int, y0: int = 0, x0: int = 0) -> tuple[FloatImage, FloatImage]:
    ys, xs = np.mgrid[y0 : y0 + h, x0 : x0 + w].astype(np.float32)
    return ys + 0.5, xs + 0.5


def _ellipse(ys: FloatImage, xs: FloatImage, cx: float, cy: float, rx: float, ry: float) -> FloatImage:
    """Coverage 0..1 of an ellipse, with a one-pixel soft edge so shapes are anti-aliased."""
    rx, ry = max(rx, 0.5), max(ry, 0.5)
    dist = np.sqrt(((xs - cx) / rx) ** 2 + ((ys - cy) / ry) ** 2)
    return np.clip((1.0 - dist) * min(rx, ry) + 0.5, 0.0, 1.0).astype(np.float32)


def _paint(img: FloatImage, alpha: FloatImage, color: Color, strength: float = 1.0) -> None:
    a = (alpha * strength)[..., None]
    img *= 1.0 - a
    img += a * np.asarray(color, dtype=np.float32)


def _even(value: float) -> int:
    return 2 * round(value / 2)


def to_planes(rgb: Image) -> Planes:
    """RGB to I420 planes with BT.601 limited-range coefficients, what decoders assume for VP8 and H.264."""
    f = rgb.astype(np.float32)
    r, g, b = f[..., 0], f[..., 1], f[..., 2]
    y = 16.0 + (65.481 * r + 128.553 * g + 24.966 * b) / 255.0
    u = 128.0 + (-37.797 * r - 74.203 * g + 112.0 * b) / 255.0
    v = 128.0 + (112.0 * r - 93.786 * g - 18.214 * b) / 255.0
    h, w = rgb.shape[0] // 2, rgb.shape[1] // 2

    def half(plane: FloatImage) -> Image:
        averaged = plane.reshape(h, 2, w, 2).mean(axis=(1, 3))
        result: Image = np.clip(averaged + 0.5, 0, 255).astype(np.uint8)
        return result

    return np.clip(y + 0.5, 0, 255).astype(np.uint8), half(u), half(v)


def _shade(color: Color, factor: float) -> Color:
    return (int(color[0] * factor), int(color[1] * factor), int(color[2] * factor))


class CpuFaceRenderer(AvatarRenderer):
    """A cartoon face whose mouth follows visemes and loudness, with blinks, gaze and breathing."""

    def __init__(self, avatar_id: str, name: str, style: FaceStyle, size: int = 512, fps: int = 25) -> None:
        self.info = AvatarInfo(avatar_id, name, "cpu", size, size, fps, "2D face drawn on the CPU")
        self.style = style
        self.size = size
        self.canvas = self._portrait()
        self.planes = to_planes(self.canvas)
        self._mouths: dict[tuple[str, int], Planes] = {}
        self._eyes: dict[tuple[int, int], Planes] = {}

    def open_stream(self, seed: int) -> RenderStream:
        """A stream with its own blink and idle-motion timing."""
        return CpuFaceStream(self, seed)

    # -- drawing, once per avatar -------------------------------------------------------------------------------

    def _portrait(self) -> Image:
        s, st = float(self.size), self.style
        h = self.size + 2 * _MARGIN
        ys, xs = _grid(h, self.size, -_MARGIN)
        top, bottom = (np.asarray(c, dtype=np.float32) for c in st.background)
        mix = np.clip(ys / s, 0.0, 1.0)[..., None]
        img: FloatImage = (top * (1.0 - mix) + bottom * mix).astype(np.float32)
        _paint(img, _ellipse(ys, xs, 0.5 * s, 1.10 * s, 0.40 * s, 0.30 * s), st.shirt)
        if st.long_hair:
            _paint(img, _ellipse(ys, xs, 0.5 * s, 0.52 * s, 0.30 * s, 0.36 * s), _shade(st.hair, 0.85))
        _paint(img, _ellipse(ys, xs, 0.5 * s, 0.78 * s, 0.085 * s, 0.13 * s), _shade(st.skin, 0.86))
        for side in (-1, 1):
            _paint(
                img, _ellipse(ys, xs, (0.5 + side * 0.245) * s, 0.47 * s, 0.035 * s, 0.055 * s), _shade(st.skin, 0.93)
            )
        _paint(img, _ellipse(ys, xs, 0.5 * s, 0.46 * s, 0.245 * s, 0.30 * s), st.skin)
        fringe = _ellipse(ys, xs, 0.5 * s, 0.30 * s, 0.262 * s, 0.17 * s) * (
            ys < 0.31 * s + 0.12 * s * np.abs(xs / s - 0.5)
        )
        _paint(img, fringe.astype(np.float32), st.hair)
        for side in (-1, 1):
            cx = (0.5 + side * 0.1) * s
            _paint(img, _ellipse(ys, xs, cx, 0.365 * s, 0.05 * s, 0.011 * s), _shade(st.hair, 0.9))
            _paint(
                img, _ellipse(ys, xs, (0.5 + side * 0.15) * s, 0.56 * s, 0.045 * s, 0.025 * s), (236, 130, 130), 0.25
            )
        _paint(img, _ellipse(ys, xs, 0.5 * s, 0.535 * s, 0.022 * s, 0.012 * s), _shade(st.skin, 0.8), 0.7)
        return np.clip(img, 0, 255).astype(np.uint8)

    def _crop(self, box: tuple[float, float, float, float]) -> tuple[int, int, FloatImage, FloatImage, FloatImage]:
        s = self.size
        x0, y0, x1, y1 = (_even(v * s) for v in box)
        y0c, y1c = y0 + _MARGIN, y1 + _MARGIN
        img = self.canvas[y0c:y1c, x0:x1].astype(np.float32)
        ys, xs = _grid(y1 - y0, x1 - x0, y0, x0)
        return x0, y0c, img, ys, xs

    def mouth_patch(self, viseme: str, step: int) -> tuple[int, int, Planes]:
        """(x, canvas y, I420 patch) of the mouth for a viseme at an openness step."""
        key = (viseme, step)
        patch = self._mouths.get(key)
        x0, y0 = _even(_MOUTH[0] * self.size), _even(_MOUTH[1] * self.size) + _MARGIN
        if patch is None:
            patch = to_planes(self._draw_mouth(viseme, step))
            self._mouths[key] = patch
        return x0, y0, patch

    def _draw_mouth(self, viseme: str, step: int) -> Image:
        s = float(self.size)
        _, _, img, ys, xs = self._crop(_MOUTH)
        half_w, base, extra, upper, lower, tongue = _SHAPES[viseme]
        cx, cy = 0.5 * s, 0.635 * s
        rx, ry = half_w * s, (base + extra * step / (_OPEN_STEPS - 1)) * s
        lip = 0.012 * s if viseme != "F" else 0.02 * s
        if ry < 1.0:  # closed: lips as one soft shape with a dark seam; pressed lips (A) look fuller
            thick = 0.016 * s if viseme == "A" else 0.011 * s
            _paint(img, _ellipse(ys, xs, cx, cy, rx, thick), _LIP)
            smile = cy - (0.004 * s if viseme == "X" else 0.0) + 0.012 * s * ((xs - cx) / rx) ** 2
            seam = np.clip(1.2 - np.abs(ys - smile), 0.0, 1.0) * (np.abs(xs - cx) < rx * 0.92)
            _paint(img, seam.astype(np.float32), _shade(_LIP, 0.55))
            return np.clip(img, 0, 255).astype(np.uint8)
        _paint(img, _ellipse(ys, xs, cx, cy, rx + lip * 0.6, ry + lip), _LIP)
        inside = _ellipse(ys, xs, cx, cy, rx, ry)
        _paint(img, inside, _INSIDE)
        if upper:
            _paint(img, inside * (ys < cy - ry + 0.012 * s), _TEETH)
        if lower:
            _paint(img, inside * (ys > cy + ry - 0.008 * s), _TEETH)
        if tongue:
            _paint(img, inside * _ellipse(ys, xs, cx, cy + ry * 0.8, rx * 0.6, ry * 0.55), _TONGUE)
        if viseme == "G":  # upper teeth resting on the lower lip
            _paint(img, _ellipse(ys, xs, cx, cy + ry, rx * 0.8, 0.008 * s), _TEETH)
        return np.clip(img, 0, 255).astype(np.uint8)

    def eyes_patch(self, lid: int, gaze: int) -> tuple[int, int, Planes]:
        """(x, canvas y, I420 patch) of both eyes with the eyelids at step ``lid`` looking ``gaze`` (-1, 0, 1)."""
        key = (lid, gaze)
        patch = self._eyes.get(key)
        x0, y0 = _even(_EYES[0] * self.size), _even(_EYES[1] * self.size) + _MARGIN
        if patch is None:
            patch = to_planes(self._draw_eyes(lid, gaze))
            self._eyes[key] = patch
        return x0, y0, patch

    def _draw_eyes(self, lid: int, gaze: int) -> Image:
        s = float(self.size)
        _, _, img, ys, xs = self._crop(_EYES)
        open_f = (1.0, 0.45, 0.0)[lid]
        for side in (-1, 1):
            cx, cy = (0.5 + side * 0.1) * s, 0.43 * s
            if open_f == 0.0:
                line = np.clip(1.5 - np.abs(ys - cy - 0.004 * s), 0.0, 1.0) * (np.abs(xs - cx) < 0.046 * s)
                _paint(img, line.astype(np.float32), _shade(self.style.hair, 0.6))
                continue
            white = _ellipse(ys, xs, cx, cy, 0.046 * s, 0.028 * s * open_f)
            _paint(img, white, (250, 250, 246))
            ix = cx + gaze * 0.012 * s
            _paint(img, white * _ellipse(ys, xs, ix, cy, 0.021 * s, 0.021 * s), self.style.iris)
            _paint(img, white * _ellipse(ys, xs, ix, cy, 0.009 * s, 0.009 * s), (20, 16, 18))
            _paint(img, white * _ellipse(ys, xs, ix + 0.006 * s, cy - 0.007 * s, 0.004 * s, 0.004 * s), (255, 255, 255))
            lid_line = np.clip(1.5 - np.abs(ys - (cy - 0.028 * s * open_f)), 0.0, 1.0) * (np.abs(xs - cx) < 0.044 * s)
            _paint(img, lid_line.astype(np.float32), _shade(self.style.hair, 0.6))
        return np.clip(img, 0, 255).astype(np.uint8)


class CpuFaceStream(RenderStream):
    """Per-session state of the CPU face: blink schedule, gaze, breathing phase and mouth smoothing."""

    def __init__(self, renderer: CpuFaceRenderer, seed: int) -> None:
        self.renderer = renderer
        self.fps = renderer.info.fps
        self.rng = random.Random(seed)
        self.phase = self.rng.random() * 2 * math.pi
        self.next_blink = self.rng.randint(self.fps, 3 * self.fps)
        self.blink_at = -len(_BLINK)
        self.gaze, self.next_gaze = 0, self.rng.randint(2 * self.fps, 4 * self.fps)
        self.open = 0.0

    async def render(self, cue: FrameCue) -> VideoFrame:
        """One frame: breathing offset, eyes at their blink step, mouth from the cue."""
        return VideoFrame.from_ndarray(self.render_sync(cue), format="yuv420p")

    def render_sync(self, cue: FrameCue) -> Image:
        """The frame as one I420 array (height * 3/2 rows: Y, then U and V folded to full-width rows)."""
        r, s = self.renderer, self.renderer.size
        bob = 2 * round(math.sin(2 * math.pi * cue.time_s / 4.5 + self.phase))  # -2, 0 or 2 rows
        top = _MARGIN + bob
        out = np.empty((s * 3 // 2, s), dtype=np.uint8)
        q = s * s // 4
        flat = out.reshape(-1)
        planes = (out[:s], flat[s * s : s * s + q].reshape(s // 2, s // 2), flat[s * s + q :].reshape(s // 2, s // 2))
        for k, (dst, src) in enumerate(zip(planes, r.planes, strict=True)):
            scale = 1 if k == 0 else 2
            dst[:] = src[top // scale : top // scale + s // scale]
        viseme, step = self._mouth(cue)
        for x, y, patch in (r.eyes_patch(self._lid(cue.index), self._gaze(cue.index)), r.mouth_patch(viseme, step)):
            for k, (dst, src) in enumerate(zip(planes, patch, strict=True)):
                scale = 1 if k == 0 else 2
                row, col = (y - top) // scale, x // scale
                dst[row : row + src.shape[0], col : col + src.shape[1]] = src
        return out

    def _lid(self, index: int) -> int:
        if index >= self.next_blink:
            self.blink_at = index
            # Blinks come every 2-6 s, now and then as a quick double blink.
            gap = self.rng.randint(2 * self.fps, 6 * self.fps) if self.rng.random() > 0.15 else len(_BLINK) + 2
            self.next_blink = index + gap
        step = index - self.blink_at
        return _BLINK[step] if 0 <= step < len(_BLINK) else 0

    def _gaze(self, index: int) -> int:
        if index >= self.next_gaze:
            self.gaze = self.rng.choice((-1, 0, 0, 1))
            self.next_gaze = index + self.rng.randint(2 * self.fps, 5 * self.fps)
        return self.gaze

    def _mouth(self, cue: FrameCue) -> tuple[str, int]:
        # Fast attack, slow release: the mouth opens on the syllable and closes over about three frames.
        self.open = max(cue.openness, self.open - 0.3)
        if not cue.talking and self.open < 0.05:
            return "X", 0
        viseme = cue.viseme if cue.viseme in VISEMES else "C"
        if viseme in ("X", "A", "B", "F", "G") or self.open < 0.08:
            return (viseme if self.open >= 0.08 else "X"), 0
        return viseme, min(_OPEN_STEPS - 1, int(self.open * _OPEN_STEPS))


def builtin_avatars(size: int = 512, fps: int = 25) -> dict[str, CpuFaceRenderer]:
    """The avatars every server offers: two faces, both drawn by the CPU renderer."""
    ada = FaceStyle(
        skin=(241, 196, 160),
        hair=(92, 52, 34),
        iris=(66, 120, 164),
        shirt=(46, 96, 148),
        background=((214, 226, 238), (168, 186, 206)),
        long_hair=True,
    )
    theo = FaceStyle(
        skin=(176, 122, 88),
        hair=(30, 26, 26),
        iris=(84, 58, 36),
        shirt=(168, 64, 58),
        background=((236, 226, 204), (196, 180, 150)),
    )
    return {
        "ada": CpuFaceRenderer("ada", "Ada", ada, size, fps),
        "theo": CpuFaceRenderer("theo", "Theo", theo, size, fps),
    }
