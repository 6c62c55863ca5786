"""Piper's timing only for the jobs that send it: a job without an alignment runs the model as it ships, a job with
one the model patched with its duration output (docs/scaling.md, "A short reply's Piper call")."""

from __future__ import annotations

import numpy as np
import pytest

from harness.audio import assert_speech
from workers.engines.base import VoiceSpec
from workers.engines.piper import PiperEngine

pytestmark = pytest.mark.unit

TEXT = "Turning on the kitchen lights. Please close the door behind you."
FLAT = {"stability": 1.0}  # the steadiest timing, so two renderings of the text last about as long


@pytest.fixture(scope="module")
def engine() -> PiperEngine:
    made = PiperEngine(threads=1)
    made.warm_up()
    return made


def _speak(engine: PiperEngine, timing: bool) -> list:
    return list(engine.synthesize(TEXT, VoiceSpec("joe"), FLAT, lambda: False, timing=timing))


def test_a_job_without_timing_gets_the_same_speech_from_the_model_as_it_ships(engine: PiperEngine) -> None:
    timed, plain = _speak(engine, True), _speak(engine, False)
    assert [c.text for c in timed] == [c.text for c in plain] == ["Turning on the kitchen lights.", TEXT[31:]]
    for chunk in timed:  # every sample accounted for by a phoneme: the alignment is exact
        assert chunk.timing and sum(n for _, n in chunk.timing) == len(chunk.pcm)
    assert all(chunk.timing is None for chunk in plain)
    with_timing = assert_speech(np.concatenate([c.pcm for c in timed]), engine.sample_rate, TEXT)
    without = assert_speech(np.concatenate([c.pcm for c in plain]), engine.sample_rate, TEXT)
    assert abs(with_timing - without) < 0.1 * with_timing, (with_timing, without)


def test_the_two_sessions_are_the_patched_model_and_the_model_as_it_ships(engine: PiperEngine) -> None:
    # The duration output is what the alignment reads, and what makes a call of the patched model slower.
    assert len(engine._voice.session.get_outputs()) == 2
    assert len(engine._plain_voice.session.get_outputs()) == 1


def test_with_a_box_share_each_kind_of_job_gets_its_own_one_thread_session_while_another_worker_speaks(
    tmp_path,
) -> None:
    from workers.cores import CoreShare

    share, other = CoreShare(tmp_path, "this"), CoreShare(tmp_path, "other")
    engine = PiperEngine(threads=2, share=share)
    engine.warm_up()
    # Four sessions: two and one threads, each with and without the duration output.
    assert len({id(voice.session) for voice in engine._voices()}) == 4
    with other.busy():  # another worker of the box is speaking: the one-thread sessions run
        assert share.others_busy()
        timed, plain = _speak(engine, True), _speak(engine, False)
    assert all(c.timing and sum(n for _, n in c.timing) == len(c.pcm) for c in timed)
    assert all(c.timing is None for c in plain)
    assert_speech(np.concatenate([c.pcm for c in plain]), engine.sample_rate, TEXT)
    share.close()
    other.close()
