"""The turbo engine's fast paths, on the CPU: the static-cache T3 loop, its sampler, and the conditioning cache.

T3 here is the real module class with a tiny random GPT-2 backbone (built in a second, no checkpoint on disk). The
CUDA-graph path replays the very step these tests run eagerly; tests/test_turbo_gpu.py runs it on a GPU.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import pytest

try:
    import torch

    from workers.engines.turbo_ckpt import backbone, tiny_backbone, turbo_t3_config
    from workers.engines.turbo_compat import apply_workarounds
    from workers.engines.turbo_static import (
        PREFILL_MAX,
        StaticT3,
        iter_speech_tokens_reference,
        processed_scores,
        sample_next,
    )
    from workers.engines.turbo_stream import Sampling
    from workers.engines.turbo_voices import CONDS_FILE, CONDS_INFO, ConditioningCache
except ImportError as err:  # pragma: no cover - a clear message instead of a bare collection error
    raise ImportError(f"the turbo tests need torch and chatterbox-tts: run ./scripts/install --test ({err})") from err

pytestmark = [pytest.mark.heavy, pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")]


@pytest.fixture(scope="module")
def t3() -> Any:
    apply_workarounds()
    from chatterbox.models.t3 import T3

    torch.manual_seed(0)
    with backbone(tiny_backbone()):
        return T3(turbo_t3_config()).eval()


@pytest.fixture(scope="module")
def prompt() -> tuple[Any, torch.Tensor]:
    from chatterbox.models.t3.modules.cond_enc import T3Cond

    gen = torch.Generator().manual_seed(1)
    cond = T3Cond(
        speaker_emb=torch.randn(1, 256, generator=gen),
        cond_prompt_speech_tokens=torch.randint(0, 6561, (1, 40), generator=gen),
        emotion_adv=0.5 * torch.ones(1, 1, 1),
    )
    return cond, torch.randint(0, 600, (1, 12), generator=gen)


def fresh(cond: Any) -> Any:
    import dataclasses

    return dataclasses.replace(cond)


def static_tokens(st: StaticT3, prompt: tuple[Any, torch.Tensor], n: int, seed: int = 5, **kwargs: Any) -> list[int]:
    torch.manual_seed(seed)
    blocks = kwargs.pop("blocks", (7, 5))
    should_stop = kwargs.pop("should_stop", lambda: False)
    return list(st.generate(fresh(prompt[0]), prompt[1], Sampling(**kwargs), n, should_stop, blocks=blocks))


def test_sampler_keeps_upstream_processors_without_a_growing_history():
    """processed_scores == HF's Temperature -> TopK -> TopP -> RepetitionPenalty on the token history."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    gen = torch.Generator().manual_seed(3)
    for temperature, top_k, top_p, penalty in ((0.8, 1000, 0.95, 1.2), (1.2, 50, 0.5, 1.5), (0.4, 6000, 0.99, 1.1)):
        procs = LogitsProcessorList(
            [
                TemperatureLogitsWarper(temperature),
                TopKLogitsWarper(top_k),
                TopPLogitsWarper(top_p),
                RepetitionPenaltyLogitsProcessor(penalty),
            ]
        )
        logits = 3 * torch.randn(1, 6563, generator=gen)
        history = torch.randint(0, 6563, (1, 300), generator=gen)  # with repeats, as real histories have
        seen = torch.zeros(1, 6563, dtype=torch.bool).scatter_(1, history, True)
        # transformers asks for the legacy LongTensor/FloatTensor types, which tensors of those dtypes are at run time
        expected = procs(cast(torch.LongTensor, history), cast(torch.FloatTensor, logits.clone()))
        got = processed_scores(
            logits, seen, torch.tensor(temperature), torch.tensor(top_p), torch.tensor(penalty), top_k
        )
        assert torch.equal(torch.isinf(got), torch.isinf(expected))
        torch.testing.assert_close(got.softmax(-1), expected.softmax(-1), rtol=1e-5, atol=1e-7)


def test_exponential_race_draws_from_the_distribution():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    seen = torch.zeros(1, 4, dtype=torch.bool)
    one = torch.tensor(1.0)
    torch.manual_seed(0)
    draws = torch.cat([sample_next(logits, seen, one, one, one, 0) for _ in range(8000)]).flatten()
    freq = torch.bincount(draws, minlength=4).float() / len(draws)
    torch.testing.assert_close(freq, probs[0], atol=0.02, rtol=0)


def test_static_cache_gives_the_same_tokens_as_the_dynamic_cache(t3, prompt):
    """Same seed, same tokens: the static cache across three attention buckets vs upstream's HF cache loop."""
    st = StaticT3(t3, 60, bucket=32)  # the prompt is 54 positions: steps cross the 64, 96 and 128 buckets
    assert not st.use_graphs and st.capture() == 0  # the graph path falls back to eager on the CPU
    torch.manual_seed(5)
    reference = list(iter_speech_tokens_reference(t3, fresh(prompt[0]), prompt[1], Sampling(), 60))
    fast = static_tokens(st, prompt, 60)
    assert len(fast) == 60 and fast == reference
    assert static_tokens(st, prompt, 60) == fast, "the cache is reset between requests"
    # Another temperature changes the tokens: the sampler's settings reach the static buffers.
    assert static_tokens(st, prompt, 60, temperature=1.2) != fast


def test_prefill_and_steps_match_the_backbone_logits(t3, prompt):
    st = StaticT3(t3, 16, bucket=32)
    cond, ids = prompt
    with torch.inference_mode():
        start = torch.full((1, 1), t3.hp.start_speech_token)
        embeds, _ = t3.prepare_input_embeds(t3_cond=fresh(cond), text_tokens=ids, speech_tokens=start)
        nxt = torch.tensor([[17, 923, 4000]])
        full = torch.cat([embeds, t3.speech_emb(nxt)], dim=1)
        expected = t3.speech_head(t3.tfmr(inputs_embeds=full).last_hidden_state)[0, embeds.shape[1] - 1 :]
        got = [st.prefill(embeds)[0]]
        st.pos.fill_(embeds.shape[1])
        st.step_no.zero_()
        for token in nxt[0].tolist():  # teacher-forced steps: feed a token, read the logits after it
            st.token.fill_(token)
            x = st.emb(st.token) + st.tfmr.wpe(st.pos.view(1, 1))
            kv = st.bucket_for(int(st.pos))
            mask = (st.positions[:kv] <= st.pos).view(1, 1, 1, kv)

            def write(i: int, k: torch.Tensor, v: torch.Tensor, kv: int = kv, mask: Any = mask) -> Any:
                st.k[i].index_copy_(2, st.pos.view(1), k)
                st.v[i].index_copy_(2, st.pos.view(1), v)
                return st.k[i, :, :, :kv], st.v[i, :, :, :kv], mask

            got.append(st.head(st._layers(x, write))[0, -1])
            st.pos.add_(1)
    torch.testing.assert_close(torch.stack(got), expected, rtol=1e-4, atol=1e-4)


def test_blocks_stop_token_and_cancel_bookkeeping(t3, prompt):
    st = StaticT3(t3, 40, bucket=32)
    full = static_tokens(st, prompt, 40, blocks=(40,))
    assert static_tokens(st, prompt, 40, blocks=(1, 3)) == full  # block sizes change when tokens are read, not which
    assert static_tokens(st, prompt, 13, blocks=(5,)) == full[:13]  # max_tokens, mid-block
    cancelled = static_tokens(st, prompt, 40, blocks=(6, 4), should_stop=lambda: True)
    assert cancelled == full[:6], "should_stop is asked after each block"
    # A stop token in the middle of a block ends the piece there; the steps computed after it are dropped.
    k = next(i for i in range(5, 40) if full[i] not in full[:i])
    saved = st.stop
    try:
        st.stop = full[k]
        assert static_tokens(st, prompt, 40, blocks=(4, 9)) == full[:k]
    finally:
        st.stop = saved
    with pytest.raises(ValueError, match="top_k"):
        static_tokens(st, prompt, 4, top_k=50)


def test_prompt_too_long_for_the_static_cache_runs_on_the_dynamic_one(t3, prompt):
    st = StaticT3(t3, 8)  # room for PREFILL_MAX + 8 positions
    long_text = torch.randint(0, 600, (1, PREFILL_MAX))
    torch.manual_seed(9)
    expected = list(iter_speech_tokens_reference(t3, fresh(prompt[0]), long_text, Sampling(), 8))
    assert static_tokens(st, (prompt[0], long_text), 8, seed=9) == expected and len(expected) == 8


def test_cache_size_and_buckets(t3):
    st = StaticT3(t3, 100)
    assert st.max_len == min(PREFILL_MAX + 100, t3.tfmr.config.n_positions)
    assert tuple(st.k.shape) == (2, 1, 2, st.max_len, 64)
    assert [st.bucket_for(p) for p in (0, 255, 256, st.max_len - 1)] == [256, 256, 512, st.max_len]


def test_reduced_precision_keeps_its_own_copy(t3, prompt):
    st = StaticT3(t3, 24, dtype=torch.bfloat16, bucket=32)
    assert st.k.dtype == torch.bfloat16 and next(st.tfmr.parameters()).dtype == torch.bfloat16
    assert next(t3.tfmr.parameters()).dtype == torch.float32, "T3's own modules stay float32"
    tokens = static_tokens(st, prompt, 24)
    assert len(tokens) == 24 and all(0 <= t < 6563 for t in tokens)


# ----- the conditioning cache ------------------------------------------------------------------------------------


class FakeConds:
    """Stands for chatterbox's Conditionals: what the cache stores, saves and loads (a unit test of the cache)."""

    def __init__(self, source: str) -> None:
        self.source = source

    def save(self, path: str) -> None:
        Path(path).write_text(self.source)


def make_cache(capacity: int = 2, model_id: str = "m1") -> ConditioningCache:
    return ConditioningCache(
        build=lambda clip: FakeConds(clip.read_bytes().hex()[:16]),
        load=lambda path: FakeConds(path.read_text()),
        model_id=model_id,
        capacity=capacity,
    )


def voice(root: Path, name: str, content: bytes) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "reference.wav").write_bytes(content)
    return folder


def test_clip_is_hashed_once_per_file_version(tmp_path, monkeypatch):
    monkeypatch.setattr("workers.engines.turbo_voices.check_clip", lambda path: 10.0)
    cache = make_cache()
    folder = voice(tmp_path, "custom-a", b"first clip")
    first = cache.get(folder, {})
    for _ in range(5):
        assert cache.get(folder, {}) is first
    assert (cache.hashed, cache.built) == (1, 1), "no per-job re-hashing of the reference clip"
    # A re-clone replaces the file (new inode, size, mtime): hashed and built again.
    (folder / "reference.wav.new").write_bytes(b"a second, longer clip")
    os.replace(folder / "reference.wav.new", folder / "reference.wav")
    second = cache.get(folder, {})
    assert second is not first and second.source == b"a second, longer clip".hex()[:16]
    assert (cache.hashed, cache.built) == (2, 2)
    assert json.loads((folder / CONDS_INFO).read_text())["model"] == "m1"


def test_device_lru_and_disk_copy_across_restarts(tmp_path, monkeypatch):
    monkeypatch.setattr("workers.engines.turbo_voices.check_clip", lambda path: 10.0)
    cache = make_cache(capacity=2)
    folders = [voice(tmp_path, f"custom-{n}", f"clip {n}".encode()) for n in range(3)]
    for folder in folders:
        cache.get(folder, {})
    assert len(cache) == 2 and cache.built == 3 and cache.loaded == 0
    assert all((f / CONDS_FILE).is_file() for f in folders)
    cache.get(folders[2], {})  # most recent: from the device LRU
    assert cache.loaded == 0
    cache.get(folders[0], {})  # evicted: back from its disk copy, not rebuilt
    assert (cache.built, cache.loaded, len(cache)) == (3, 1, 2)

    restarted = make_cache(capacity=2)  # a new process: only the disk copies are left
    assert restarted.get(folders[1], {}).source == b"clip 1".hex()[:16]
    assert (restarted.built, restarted.loaded) == (0, 1)
    other_weights = make_cache(capacity=2, model_id="m2")  # other weights: the disk copy is stale
    other_weights.get(folders[1], {})
    assert (other_weights.built, other_weights.loaded) == (1, 0)


def test_turbo_speed_settings_parse_and_refuse_bad_values():
    from zsynth.core.config import Settings, SettingsError

    default = Settings.from_env({})
    assert (default.turbo.cuda_graphs, default.turbo.dtype) == (True, "bfloat16")
    chosen = Settings.from_env({"ZSYNTH_TURBO_CUDA_GRAPHS": "false", "ZSYNTH_TURBO_DTYPE": "Float32"})
    assert (chosen.turbo.cuda_graphs, chosen.turbo.dtype) == (False, "float32")
    with pytest.raises(SettingsError, match="ZSYNTH_TURBO_DTYPE"):
        Settings.from_env({"ZSYNTH_TURBO_DTYPE": "float16"})


# ----- graph-readiness of the decode step ---------------------------------------------------------------------------


def sorted_scores_reference(logits: torch.Tensor, temperature: float, top_p: float, top_k: int) -> torch.Tensor:
    """The sampler's former top-k/top-p: a full-vocabulary sort after the top-k threshold (the eager reference)."""
    import math

    scores = logits.float() / temperature
    kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
    scores = scores.masked_fill(scores < kth, -math.inf)
    ordered, order = torch.sort(scores, descending=False, dim=-1)
    drop = ordered.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)
    drop[..., -1:] = False
    return scores.masked_fill(drop.scatter(-1, order, drop), -math.inf)


def test_sampler_without_a_full_sort_draws_the_same_tokens():
    """Top-p on top-k's own sorted values: the same scores and, from one seed, the same tokens as the full sort."""
    gen = torch.Generator().manual_seed(11)
    seen = torch.zeros(1, 6563, dtype=torch.bool)
    one = torch.tensor(1.0)
    for temperature, top_k, top_p in ((0.8, 1000, 0.95), (1.2, 50, 0.5), (0.4, 6000, 0.99)):
        logits = [3 * torch.randn(1, 6563, generator=gen) for _ in range(200)]
        t, p = torch.tensor(temperature), torch.tensor(top_p)
        for row in logits[:20]:
            got = processed_scores(row, seen, t, p, one, top_k)
            assert torch.equal(torch.isinf(got), torch.isinf(sorted_scores_reference(row, temperature, top_p, top_k)))
        torch.manual_seed(3)
        fast = [int(sample_next(row, seen, t, p, one, top_k)) for row in logits]
        torch.manual_seed(3)
        reference = []
        for row in logits:
            probs = sorted_scores_reference(row, temperature, top_p, top_k).softmax(dim=-1)
            reference.append(int(torch.argmax(probs / torch.empty_like(probs).exponential_(), dim=-1)))
        assert fast == reference


def test_decode_step_and_sampler_compile_fullgraph(t3, prompt):
    """The decode step (cache write, attention over a bucket, sampler, bookkeeping) traces as one graph with
    ``fullgraph=True``: no host sync inside; a second step of the same bucket compiles nothing new."""
    import torch._dynamo

    graphs: list[int] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        graphs.append(1)
        return gm.forward

    torch._dynamo.reset()
    st = StaticT3(t3, 24, bucket=32)
    eager = static_tokens(st, prompt, 10)
    step = torch.compile(st._decode, fullgraph=True, dynamic=False, backend=counting)
    st._step = lambda position: step(st.bucket_for(position))  # type: ignore[method-assign]
    compiled = static_tokens(st, prompt, 10)  # prompt of 54 positions: steps write at 54 to 62, bucket 64
    assert compiled == eager
    assert len(graphs) == 1, "one graph for every step of the bucket"
    assert static_tokens(st, prompt, 10) == eager and len(graphs) == 1, "a second request compiles nothing"
    torch._dynamo.reset()
