"""Several Turbo streams advanced in turn, one chunk at a time, each giving exactly what it gives alone.

A worker shares its one slot between streams chunk by chunk: it holds several open ``TurboEngine.synthesize``
generators and calls ``next()`` on whichever is due. T3's static KV cache and its captured steps are shared, so each
stream's cache and sampler state is copied off the buffers when another stream runs and back on when it resumes
(``StaticT3.activate``), and each stream's random number state is put in place for each of its steps
(``turbo.StreamRng``). These tests run the real classes on the CPU: the tiny T3 alone (tokens, in seconds), and the
whole engine from a tiny random-weight checkpoint (audio; the checkpoint's full-size S3Gen makes it slow).

Comparisons are exact: on the CPU with one thread the same operations on the same inputs give the same bits, and a
stream's cache positions past its own are masked out of attention with weights of exactly zero, whatever another
stream left there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

try:
    import torch

    from workers.engines.turbo import TurboEngine
    from workers.engines.turbo_ckpt import backbone, tiny_backbone, turbo_t3_config
    from workers.engines.turbo_compat import apply_workarounds
    from workers.engines.turbo_static import StaticT3
    from workers.engines.turbo_stream import Sampling
except ImportError as err:  # pragma: no cover - a clear message instead of a bare collection error
    raise ImportError(f"the turbo tests need torch and chatterbox-tts: run ./scripts/install --test ({err})") from err

from workers.engines.base import EngineChunk, VoiceSpec

from .turbo_helpers import make_voice, turbo_settings

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.timeout(1200),
    pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning"),
]


def interleave(streams: Sequence[Iterator[Any]], order: Sequence[int]) -> list[list[Any]]:
    """Advance the streams one ``next()`` at a time in ``order`` (repeated, finished ones skipped) until all end."""
    got: list[list[Any]] = [[] for _ in streams]
    live = set(range(len(streams)))
    turn = 0
    while live:
        index = order[turn % len(order)]
        turn += 1
        if index not in live:
            continue
        item = next(streams[index], None)
        if item is None:
            live.discard(index)
        else:
            got[index].append(item)
    return got


# ----- T3 alone: tokens -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def t3() -> Any:
    apply_workarounds()
    from chatterbox.models.t3 import T3

    torch.manual_seed(0)
    with backbone(tiny_backbone()):
        return T3(turbo_t3_config()).eval()


def prompts(n: int) -> list[tuple[Any, torch.Tensor]]:
    """``n`` different prompts: speaker, voice prompt and text of different lengths."""
    from chatterbox.models.t3.modules.cond_enc import T3Cond

    gen = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        cond = T3Cond(
            speaker_emb=torch.randn(1, 256, generator=gen),
            cond_prompt_speech_tokens=torch.randint(0, 6561, (1, 30 + 7 * i), generator=gen),
            emotion_adv=0.5 * torch.ones(1, 1, 1),
        )
        out.append((cond, torch.randint(0, 600, (1, 9 + 5 * i), generator=gen)))
    return out


def token_stream(
    st: StaticT3, prompt: tuple[Any, torch.Tensor], seed: int, n: int, **sampling: Any
) -> Generator[int, None, None]:
    """One stream of T3 tokens with its own random number state, as the engine keeps one per stream."""
    from workers.engines.turbo import StreamRng

    rng = StreamRng(cuda=False)
    with rng.active():
        torch.manual_seed(seed)
    tokens = st.generate(dataclasses.replace(prompt[0]), prompt[1], Sampling(**sampling), n, lambda: False, (5, 3))
    while True:
        with rng.active():
            token = next(tokens, None)
        if token is None:
            return
        yield token


def test_t3_streams_advanced_in_turn_give_the_tokens_each_gives_alone(t3: Any) -> None:
    st = StaticT3(t3, 50, bucket=32)  # prompts of 41 to 69 positions: the steps cross two or three buckets
    setups = [(p, 11 + i, {"temperature": 0.5 + 0.3 * i}) for i, p in enumerate(prompts(3))]
    alone = [list(token_stream(st, p, seed, 50, **kw)) for p, seed, kw in setups]
    assert all(len(tokens) == 50 for tokens in alone) and len({tuple(t) for t in alone}) == 3
    switches = st.switches
    # Token by token (a block is 5 then 3 tokens, so a switch lands at every point of a block) and in uneven turns.
    for order in ([0, 1, 2], [2, 0, 0, 1, 2, 2, 1]):
        together = interleave([token_stream(st, p, seed, 50, **kw) for p, seed, kw in setups], order)
        assert together == alone
    assert st.switches > switches + 20 and st.resident is None, "every stream released its buffers at its end"


def test_a_stream_stopped_midway_leaves_the_others_whole(t3: Any) -> None:
    st = StaticT3(t3, 30, bucket=32)
    (p1, p2) = prompts(2)
    alone = list(token_stream(st, p2, 5, 30))
    other = list(token_stream(st, p1, 4, 30))
    first, second = token_stream(st, p1, 4, 30), token_stream(st, p2, 5, 30)
    assert [next(first) for _ in range(7)] == other[:7]
    assert [next(second) for _ in range(4)] == alone[:4]
    first.close()  # a cancel or barge-in: the stream ends where it is
    assert list(second) == alone[4:]
    assert st.resident is None


def test_state_memory_per_stream(t3: Any) -> None:
    """The figure docs/limits.md gives per stream: the full-length K and V of every layer, plus the sampler state."""
    st = StaticT3(t3, 100)
    cfg = t3.tfmr.config
    cache = 2 * cfg.n_layer * cfg.n_embd * st.max_len * 4  # K and V, float32
    small = 8 + 8 + 8 + 8 * (st.max_len + 1) + st.vocab + 4 * 3  # token, pos, step, out, seen, three settings
    assert st.stream_bytes == cache + small


# ----- the whole engine: audio ------------------------------------------------------------------------------------

MAX_TOKENS = 24  # a piece's cap: two T3 blocks (8 + 3 lookahead, then 16) and two to three chunks a piece


@pytest.fixture(scope="module")
def engine(turbo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> TurboEngine:
    data = tmp_path_factory.mktemp("turbo-data")
    make_voice(data / "voices" / "custom-aaaa", 6.2, 120.0, seed=1)
    make_voice(data / "voices" / "custom-bbbb", 6.5, 220.0, seed=2)
    return TurboEngine(turbo_settings(turbo_ckpt, data, turbo_max_tokens=MAX_TOKENS))  # the session's checkpoint


@dataclasses.dataclass(frozen=True)
class Request:
    text: str
    voice: str
    seed: int
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)


def open_stream(engine: TurboEngine, request: Request) -> Generator[EngineChunk, None, None]:
    return engine.synthesize(request.text, VoiceSpec(request.voice), request.settings, lambda: False, seed=request.seed)


def assert_same(together: list[EngineChunk], alone: list[EngineChunk]) -> None:
    assert len(together) == len(alone)
    for got, want in zip(together, alone, strict=True):
        np.testing.assert_array_equal(got.pcm, want.pcm)
        assert (got.text, got.extra["piece"], got.extra["piece_end"]) == (
            want.text,
            want.extra["piece"],
            want.extra["piece_end"],
        )
        assert got.extra.get("tokens") == want.extra.get("tokens")  # a piece's speech tokens, on its last chunk


def test_two_streams_chunk_by_chunk_give_the_audio_each_gives_alone(engine: TurboEngine) -> None:
    requests = [Request("First stream speaking now.", "builtin", 7), Request("The second one talks.", "builtin", 8)]
    alone = [list(open_stream(engine, r)) for r in requests]
    assert all(len(chunks) >= 2 for chunks in alone), "a piece must stream in several chunks, or nothing interleaves"
    assert not np.array_equal(np.concatenate([c.pcm for c in alone[0]]), np.concatenate([c.pcm for c in alone[1]]))
    switches = engine.t3.switches
    together = interleave([open_stream(engine, r) for r in requests], [0, 1])
    for got, want in zip(together, alone, strict=True):
        assert_same(got, want)
    assert engine.t3.switches >= switches + 3, "T3's state was swapped between the streams mid-piece"
    # A cancel or barge-in closes one stream mid-piece; the other carries on as it would alone.
    first, second = open_stream(engine, requests[0]), open_stream(engine, requests[1])
    assert_same([next(first)], alone[0][:1])
    assert_same([next(second)], alone[1][:1])
    first.close()
    assert_same(list(second), alone[1][1:])
    # What a stream may hold of its own besides T3's state copy: S3Gen's noise for a 250-token voice prompt and the
    # piece's tokens and lookahead (2 frames each), and the excitation of the largest vocoder span, in float32.
    assert engine.stream_bytes - engine.t3.stream_bytes == 4 * (80 * 2 * (250 + MAX_TOKENS + 3) + 576 * 480)


def test_three_streams_with_their_own_voices_texts_and_settings(engine: TurboEngine) -> None:
    requests = [
        # Two pieces (over 300 characters): the stream's second piece starts T3 afresh between the others' chunks.
        Request(" ".join(["A cloned voice speaks this sentence, long enough to matter."] * 6), "custom-aaaa", 1),
        Request("Another voice speaks.", "custom-bbbb", 2, {"stability": 0.9, "speed": 0.8}),
        Request("The built-in voice, too!", "builtin", 3, {"stability": 0.1}),
    ]
    alone = [list(open_stream(engine, r)) for r in requests]
    assert {c.extra["piece"] for c in alone[0]} == {0, 1}
    # Uneven turns: a stream sometimes resumes right after itself (nothing to swap), sometimes after either other.
    together = interleave([open_stream(engine, r) for r in requests], [0, 1, 1, 2, 0, 2, 1])
    for got, want in zip(together, alone, strict=True):
        assert_same(got, want)
    again = list(open_stream(engine, requests[1]))  # and alone after all that, still the same
    assert_same(again, alone[1])


def test_unseeded_streams_draw_their_own_numbers(engine: TurboEngine) -> None:
    """Two unseeded streams of the same text do not share one random sequence (each gets a seed of its own)."""
    a, b = (engine.synthesize("Same words.", VoiceSpec("builtin"), {}, lambda: False) for _ in range(2))
    first, second = interleave([a, b], [0, 1])
    assert not np.array_equal(np.concatenate([c.pcm for c in first]), np.concatenate([c.pcm for c in second]))
