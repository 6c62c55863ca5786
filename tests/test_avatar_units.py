"""Avatar building blocks without a network: visemes, framing of speech, the CPU face, the clock, settings."""

from __future__ import annotations

import numpy as np
import pytest
from av import VideoFrame

from zsynth.avatar.media import Playout
from zsynth.avatar.renderers import FrameCue, builtin_avatars
from zsynth.avatar.renderers.cpu import CpuFaceStream
from zsynth.avatar.session import ice_configuration
from zsynth.avatar.speech import SAMPLES_PER_FRAME, AudioSlot, Framer, SpeechTask, mouth_cues
from zsynth.avatar.visemes import VISEMES, openness, phoneme_viseme, timing_labels, viseme_index
from zsynth.core.config import Settings, SettingsError
from zsynth.core.protocol import Event
from zsynth.services.auth import clamp_ttl

SILENT = np.zeros(1920, dtype=np.int16)


def rgb(stream, cue: FrameCue) -> np.ndarray:
    """A rendered frame as RGB, the way a viewer decodes it."""
    return VideoFrame.from_ndarray(stream.render_sync(cue), format="yuv420p").to_ndarray(format="rgb24")


def tone(samples: int, peak: int = 12000) -> np.ndarray:
    t = np.arange(samples) / 48000
    return (peak * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("phoneme", "viseme"),
    [("p", "A"), ("m", "A"), ("f", "G"), ("ɑː", "D"), ("æ", "C"), ("uː", "F"), ("w", "F"), ("l", "H"), ("s", "B")]
    + [("ɔ", "E"), (" ", "X"), ("ˈ", "X"), (".", "X"), ("AA1", "D"), ("M", "A"), ("UW0", "F"), ("L", "H")],
)
def test_phonemes_map_to_visemes(phoneme: str, viseme: str) -> None:
    assert phoneme_viseme(phoneme) == viseme


@pytest.mark.unit
def test_timing_is_spread_over_the_resampled_audio() -> None:
    labels = timing_labels([["h", 100], ["ɑ", 200], ["l", 100]], engine_samples=400, out_samples=800)
    assert list(labels[:200]) == [viseme_index("C")] * 200
    assert list(labels[200:600]) == [viseme_index("D")] * 400
    assert list(labels[600:]) == [viseme_index("H")] * 200


@pytest.mark.unit
def test_openness_follows_loudness() -> None:
    assert openness(np.zeros(960, dtype=np.int16)) == 0.0
    assert openness(tone(960, 300)) < openness(tone(960, 3000)) < openness(tone(960, 20000)) <= 1.0
    assert mouth_cues(np.zeros(960, dtype=np.int16), -1)[1] == "X"
    assert mouth_cues(tone(960, 20000), -1)[1] == "D"
    assert mouth_cues(tone(960, 20000), viseme_index("F"))[1] == "F"
    assert mouth_cues(np.zeros(960, dtype=np.int16), viseme_index("D"))[1] == "X"  # no sound, no open mouth


@pytest.mark.unit
def test_framer_cuts_chunks_into_20ms_frames_with_cues() -> None:
    task = SpeechTask("hello", "v")
    framer = Framer(task)
    audio = tone(2500).astype("<i2").tobytes()
    slots = framer.push(Event("chunk", 0, {"samples": 1000, "timing": [["ɑ", 1000]]}, audio))
    assert len(slots) == 2 and all(s.pcm.size == SAMPLES_PER_FRAME and s.task is task for s in slots)
    assert {s.viseme for s in slots} == {"D"}
    tail = framer.flush()
    assert len(tail) == 1 and not tail[0].pcm[2500 - 2 * SAMPLES_PER_FRAME :].any()  # zero padded
    assert task.frames_fed == 3
    joined = np.concatenate([s.pcm for s in slots + tail])[:2500]
    assert np.array_equal(joined, tone(2500))


@pytest.mark.unit
def test_timeline_plays_in_order_and_peeks_ahead() -> None:
    timeline = Playout()
    slots = [AudioSlot(tone(960), 0.5, v) for v in ("A", "C", "D")]
    timeline.pending.extend(slots)
    assert timeline.peek(1) is slots[1] and timeline.peek(5) is None
    assert timeline.take(0) is slots[0]
    assert timeline.peek(0) is slots[0] and timeline.peek(1) is slots[1]
    timeline.clear()
    assert timeline.take(1) is None and timeline.queued_s == 0


@pytest.mark.unit
def test_cpu_face_moves_its_mouth_blinks_and_differs_per_avatar() -> None:
    avatars = builtin_avatars()
    stream = avatars["ada"].open_stream(seed=7)
    assert isinstance(stream, CpuFaceStream)  # the built-in avatars are drawn by the CPU renderer
    mouth = (slice(294, 371), slice(189, 323))
    shapes = {}
    for viseme in VISEMES:
        stream.open = 0.0
        frame = rgb(stream, FrameCue(1, 0.0, True, viseme, 1.0, SILENT))
        assert frame.shape == (512, 512, 3) and frame.dtype == np.uint8
        shapes[viseme] = frame[mouth].copy()
    assert len({s.tobytes() for s in shapes.values()}) == len(VISEMES), "every viseme has its own mouth"
    assert np.abs(shapes["D"].astype(int) - shapes["X"]).mean() > 5
    # Idle for ten seconds: the eyes close at least once and the mouth stays at rest.
    eyes = (slice(200, 240), slice(160, 352))
    idle = [stream.render_sync(FrameCue(i, i / 25, False, "X", 0.0, SILENT))[:512] for i in range(250)]  # Y plane
    eye_states = {f[eyes].tobytes() for f in idle}
    assert len(eye_states) >= 2, "no blink in ten seconds"
    ada = rgb(avatars["ada"].open_stream(1), FrameCue(0, 0, False, "X", 0, SILENT))
    theo = rgb(avatars["theo"].open_stream(1), FrameCue(0, 0, False, "X", 0, SILENT))
    assert np.abs(ada.astype(int) - theo).mean() > 10


@pytest.mark.stack
def test_avatar_settings_parse_and_validate() -> None:
    settings = Settings.from_env(
        {
            "ZSYNTH_AVATAR_PORT": "9100",
            "ZSYNTH_AVATAR_MAX_SESSIONS": "3",
            "ZSYNTH_AVATAR_IDLE_TIMEOUT": "45",
            "ZSYNTH_AVATAR_ICE_SERVERS": "stun:stun.example.org:3478, turn:turn.example.org:3478",
            "ZSYNTH_AVATAR_ICE_USERNAME": "u",
            "ZSYNTH_AVATAR_ICE_CREDENTIAL": "p",
        }
    )
    assert (settings.avatar.port, settings.avatar.max_sessions, settings.avatar.idle_timeout_s) == (9100, 3, 45.0)
    servers = ice_configuration(settings).iceServers
    assert servers is not None
    assert [s.urls for s in servers] == ["stun:stun.example.org:3478", "turn:turn.example.org:3478"]
    assert servers[0].username is None and (servers[1].username, servers[1].credential) == ("u", "p")
    assert Settings().avatar.port == 8100 and ice_configuration(Settings()).iceServers == []
    with pytest.raises(SettingsError, match="ZSYNTH_AVATAR_ICE_SERVERS"):
        Settings.from_env({"ZSYNTH_AVATAR_ICE_SERVERS": "http://example.org"})
    with pytest.raises(SettingsError, match="ZSYNTH_AVATAR_SIZE"):
        Settings.from_env({"ZSYNTH_AVATAR_SIZE": "511"})


@pytest.mark.unit
def test_ttl_is_clamped_to_30_600() -> None:
    assert (clamp_ttl(1), clamp_ttl(300), clamp_ttl(10**6)) == (30, 300, 600)
