"""CPU proofs that the turbo engine's S3Gen runs graph-ready: bucketed shapes, no host work inside a step.

The modules are chatterbox's own classes (``CausalMaskedDiffWithXvec`` with its conformer encoder and meanflow
``ConditionalDecoder``, ``HiFTGenerator``) at a tiny width with random weights. ``torch.compile(fullgraph=True)``
with the ``eager`` backend runs dynamo's tracing only: it fails on a graph break, a host sync (``.item()``,
``.tolist()``, a tensor in an ``if``) or a data-dependent shape, the same things a CUDA graph capture fails on, without
a C++ toolchain. Each compile is of a small module; the file takes about 100 s of CPU time in all (5 minutes of wall
time on two cores shared by many jobs), a third of it the flow's compile test (4 graphs traced).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("chatterbox")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from workers.engines.turbo_compat import apply_workarounds  # noqa: E402
from workers.engines.turbo_flow import BucketedFlow, choose_bucket  # noqa: E402

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.timeout(600),
    pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning"),
]

VOCAB = 128  # token ids of the tiny flow (the real one has 6561)
PROMPT = 30  # prompt tokens of the test voice (a real 10 s reference has 250)


def tiny_flow() -> Any:
    """S3Gen's flow from its real classes at a tiny size (the encoder's 512 channels are fixed upstream)."""
    apply_workarounds()
    from chatterbox.models.s3gen.configs import CFM_PARAMS
    from chatterbox.models.s3gen.decoder import ConditionalDecoder
    from chatterbox.models.s3gen.flow import CausalMaskedDiffWithXvec
    from chatterbox.models.s3gen.flow_matching import CausalConditionalCFM
    from chatterbox.models.s3gen.transformer.upsample_encoder import UpsampleConformerEncoder

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        encoder = UpsampleConformerEncoder(output_size=512, attention_heads=2, linear_units=32, num_blocks=1)
        estimator = ConditionalDecoder(
            in_channels=320,
            out_channels=80,
            causal=True,
            channels=[32],
            attention_head_dim=16,
            n_blocks=1,
            num_mid_blocks=1,
            num_heads=2,
            meanflow=True,
        )
        decoder = CausalConditionalCFM(spk_emb_dim=80, cfm_params=CFM_PARAMS, estimator=estimator)
        return CausalMaskedDiffWithXvec(vocab_size=VOCAB, encoder=encoder, decoder=decoder).eval()


@dataclasses.dataclass
class Conds:
    """Stands for chatterbox's Conditionals: the flow reads only its ``gen`` dict."""

    gen: dict[str, Any]


def voice_conds(seed: int = 1) -> Conds:
    gen = torch.Generator().manual_seed(seed)
    return Conds(
        gen={
            "prompt_token": torch.randint(0, VOCAB, (1, PROMPT), generator=gen),
            "prompt_token_len": torch.tensor([PROMPT]),
            "prompt_feat": torch.randn(1, 2 * PROMPT, 80, generator=gen),
            "prompt_feat_len": None,
            "embedding": torch.randn(1, 192, generator=gen),
        }
    )


@pytest.fixture(scope="module")
def flow() -> Any:
    return tiny_flow()


class CountingBackend:
    """A dynamo backend that runs the traced graph eagerly and counts how many graphs it was given."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs += 1
        return gm.forward


def upstream_mel(flow: Any, conds: Conds, speech: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The installed ``flow.inference`` (meanflow, 2 steps, finalize), unpadded, from the same starting noise."""
    gen = conds.gen
    total = PROMPT + speech.shape[1]
    with torch.inference_mode():
        mel, _ = flow.inference(
            speech,
            torch.tensor([speech.shape[1]]),
            gen["prompt_token"],
            gen["prompt_token_len"],
            gen["prompt_feat"],
            None,
            gen["embedding"],
            finalize=True,
            n_timesteps=2,
            noised_mels=noise[:, :, : 2 * total],  # the whole length: upstream draws none of its own
            meanflow=True,
        )
    out: torch.Tensor = mel
    return out


def test_bucket_chooser_and_over_long_fallback(flow: Any) -> None:
    assert [choose_bucket(n, (64, 96)) for n in (1, 64, 65, 96, 97)] == [64, 64, 96, 96, None]
    runner = BucketedFlow(flow, buckets=(64, 96))
    voice = runner.voice(voice_conds())
    assert runner.bucket_for(voice, 34) == 64 and runner.bucket_for(voice, 35) == 96
    assert runner.bucket_for(voice, 67) is None
    speech = torch.randint(0, VOCAB, (1, 70))  # 100 tokens with the prompt: over the largest bucket
    noise = torch.randn(1, 80, 200)
    mel = runner.mels(voice, speech, noise)
    assert runner.fallbacks == 1 and runner.calls == {0: 1}
    assert mel.shape == (1, 80, 140)
    torch.testing.assert_close(mel, upstream_mel(flow, voice_conds(), speech, noise), rtol=0, atol=1e-4)


@pytest.mark.parametrize("n_tokens", [5, 34, 50])
def test_padded_flow_gives_upstreams_mel(flow: Any, n_tokens: int) -> None:
    """(a) Padded to its bucket, the flow's mel equals the installed unpadded ``flow.inference`` within 1e-4
    (float32 sums in another order: about 2e-6 is typical, on values up to about 5)."""
    conds = voice_conds()
    runner = BucketedFlow(flow, buckets=(64, 96))
    speech = torch.randint(0, VOCAB, (1, n_tokens), generator=torch.Generator().manual_seed(n_tokens))
    noise = torch.randn(1, 80, 2 * 96, generator=torch.Generator().manual_seed(7))
    expected = upstream_mel(flow, conds, speech, noise)
    got = runner.mels(runner.voice(conds), speech, noise)
    assert runner.fallbacks == 0 and sum(runner.calls.values()) == 1
    assert got.shape == expected.shape == (1, 80, 2 * n_tokens)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)


def test_cfm_step_and_encoder_compile_fullgraph_once_per_bucket(flow: Any) -> None:
    """(b) one CFM step (and the encoder) trace with ``fullgraph=True`` (a graph break raises) for every bucket;
    (c) a second call of the same bucket, with another length inside it, compiles nothing new."""
    torch._dynamo.reset()
    backend = CountingBackend()
    runner = BucketedFlow(flow, buckets=(64, 96), compile_mode="default", backend=backend)
    eager = BucketedFlow(flow, buckets=(64, 96))
    voice = runner.voice(voice_conds())
    noise = torch.randn(1, 80, 2 * 96)
    spent = runner.warm(voice)  # what the engine does before READY
    assert set(spent) == {64, 96}
    assert backend.graphs == 4, "per bucket one graph for the encoder and one for the step (both steps share it)"
    with torch.inference_mode():
        first = runner.mels(voice, torch.randint(0, VOCAB, (1, 20)), noise)
        runner.mels(voice, torch.randint(0, VOCAB, (1, 50)), noise)
    assert backend.graphs == 4
    graphs_before = counters["stats"]["unique_graphs"]
    speech = torch.randint(0, VOCAB, (1, 11))
    with torch.inference_mode():
        again = runner.mels(voice, speech, noise)  # bucket 64 again, another real length
        runner.mels(voice, torch.randint(0, VOCAB, (1, 60)), noise)  # bucket 96 again
    assert backend.graphs == 4 and counters["stats"]["unique_graphs"] == graphs_before, "nothing recompiled"
    assert first.shape == (1, 80, 40) and again.shape == (1, 80, 22)
    torch.testing.assert_close(again, eager.mels(eager.voice(voice_conds()), speech, noise), rtol=0, atol=1e-5)
    torch._dynamo.reset()


def test_a_flow_buckets_whole_pass_traces_as_one_graph(flow: Any) -> None:
    """What ``BucketedFlow.capture`` records per bucket on a GPU (``torch.cuda.CUDAGraph``): the masks built from the
    length tensor, the encoder and both steps, read from the bucket's own buffers. It traces as one graph with
    ``fullgraph=True`` (no host sync, no data-dependent shape), another length in the same bucket traces nothing new,
    and the result is the eager pass's."""
    torch._dynamo.reset()
    backend = CountingBackend()
    runner = BucketedFlow(flow, buckets=(64, 96))
    eager = BucketedFlow(flow, buckets=(64, 96))
    runner.run_bucket = torch.compile(  # type: ignore[method-assign]
        runner.run_bucket, fullgraph=True, dynamic=False, backend=backend
    )
    voice, eager_voice = runner.voice(voice_conds()), eager.voice(voice_conds())
    noise = torch.randn(1, 80, 2 * 96)
    for n_tokens, graphs in ((20, 1), (11, 1), (50, 2), (60, 2)):
        speech = torch.randint(0, VOCAB, (1, n_tokens))
        got = runner.mels(voice, speech, noise)
        assert backend.graphs == graphs, f"{n_tokens} tokens"
        torch.testing.assert_close(got, eager.mels(eager_voice, speech, noise), rtol=0, atol=1e-6)
    torch._dynamo.reset()


def test_voice_preparation_is_cached_with_the_conditioning(flow: Any) -> None:
    """(d) the per-voice share (projected embedding, prompt tokens, prompt frames per bucket) is built once per
    voice and dropped with the voice's conditioning."""
    import gc

    runner = BucketedFlow(flow, buckets=(64, 96))
    conds = voice_conds()
    voice = runner.voice(conds)
    noise = torch.randn(1, 80, 2 * 96)
    for n in (10, 20, 50):
        assert runner.voice(conds) is voice
        runner.mels(runner.voice(conds), torch.randint(0, VOCAB, (1, n)), noise)
    assert runner.voices_built == 1 and set(voice.conds) == {128, 192}
    cond_64 = voice.conds[128]
    runner.mels(voice, torch.randint(0, VOCAB, (1, 12)), noise)
    assert voice.conds[128] is cond_64, "the bucket's prompt frames are placed once"
    other = voice_conds(seed=2)
    assert runner.voice(other) is not voice and runner.voices_built == 2
    del conds, other
    gc.collect()
    assert runner._voices == {}, "an evicted voice's flow inputs go with it"


def test_position_tables_follow_the_flow_onto_its_device_and_dtype(flow: Any) -> None:
    """The encoder's relative position table is a plain attribute that ``Module.to`` leaves behind; left there it
    enters the compiled encoder as a CPU input, and CUDA graphs skip the encoder (seen on the first H100 run).
    BucketedFlow moves it once, so a flow in another dtype (here float64; on a GPU also the device) finds none
    left behind."""
    import copy

    wide = copy.deepcopy(flow).double()
    tables = [m for m in wide.modules() if isinstance(getattr(m, "pe", None), torch.Tensor)]
    assert tables and any(m.pe.dtype != torch.float64 for m in tables), "the test needs a table left behind"
    BucketedFlow(wide, buckets=(64,))
    assert all(m.pe.dtype == torch.float64 for m in tables)


# ----- the vocoder -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hift() -> Any:
    """HiFT from its real classes and S3Gen's rates (8, 5, 3; 480 samples a frame), narrow and with fewer residual
    branches than S3Gen's, so dynamo traces it in seconds."""
    apply_workarounds()
    from chatterbox.models.s3gen.f0_predictor import ConvRNNF0Predictor
    from chatterbox.models.s3gen.hifigan import HiFTGenerator

    torch.manual_seed(0)
    return HiFTGenerator(
        sampling_rate=24000,
        base_channels=16,
        upsample_rates=[8, 5, 3],
        upsample_kernel_sizes=[16, 11, 7],
        resblock_kernel_sizes=[3, 7],
        resblock_dilation_sizes=[[1, 3], [1, 3]],
        source_resblock_kernel_sizes=[7, 7, 11],
        source_resblock_dilation_sizes=[[1, 3], [1, 3], [1, 3]],
        f0_predictor=ConvRNNF0Predictor(cond_channels=16),
    ).eval()


def test_padded_vocoder_gives_upstreams_audio(hift: Any) -> None:
    """(a) A span padded to its bucket gives upstream's ``HiFTGenerator.inference`` audio within 1e-5 (the same
    source draw: one seed), with and without a carried-over source; an over-long span runs unpadded."""
    from workers.engines.turbo_vocoder import BucketedVocoder

    vocoder = BucketedVocoder(hift, buckets=(32, 64))
    gen = torch.Generator().manual_seed(4)
    for frames in (7, 20, 33, 64, 70):
        mel = torch.randn(1, 80, frames, generator=gen)
        torch.manual_seed(frames)
        expected, source = hift.inference(mel)
        torch.manual_seed(frames)
        got, got_source = vocoder.inference(mel)
        assert got.shape == expected.shape == (1, 480 * frames)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        cache = source[:, :, -480 * 3 :]
        torch.manual_seed(1)
        expected, _ = hift.inference(mel, cache_source=cache)
        torch.manual_seed(1)
        torch.testing.assert_close(vocoder.inference(mel, cache)[0], expected, rtol=0, atol=1e-5)
    assert vocoder.fallbacks == 2 and vocoder.calls == {32: 4, 64: 4, 0: 2}


def test_vocoder_convolutions_compile_fullgraph_once_per_bucket(hift: Any) -> None:
    """(b) the convolutions trace as one graph with ``fullgraph=True`` per bucket, ``stft``/``istft`` outside;
    (c) another span length in a bucket already seen compiles nothing."""
    from workers.engines.turbo_vocoder import BucketedVocoder

    torch._dynamo.reset()
    backend = CountingBackend()
    vocoder = BucketedVocoder(hift, buckets=(32, 64), compile_mode="default", backend=backend)
    eager = BucketedVocoder(hift, buckets=(32, 64))
    for frames, graphs in ((20, 1), (50, 2), (9, 2), (64, 2), (32, 2)):
        mel = torch.randn(1, 80, frames)
        torch.manual_seed(2)
        got, _ = vocoder.inference(mel)
        assert backend.graphs == graphs, f"{frames} frames"
        torch.manual_seed(2)
        torch.testing.assert_close(got, eager.inference(mel)[0], rtol=0, atol=1e-6)
    torch._dynamo.reset()


def test_a_vocoder_buckets_pass_traces_as_one_graph(hift: Any) -> None:
    """What ``BucketedVocoder.capture`` records per bucket: the masks from the length tensor and the convolutions,
    one graph with ``fullgraph=True``; another span length in the bucket traces nothing new."""
    from workers.engines.turbo_vocoder import BucketedVocoder

    torch._dynamo.reset()
    backend = CountingBackend()
    vocoder = BucketedVocoder(hift, buckets=(32, 64))
    eager = BucketedVocoder(hift, buckets=(32, 64))
    vocoder.run_bucket = torch.compile(  # type: ignore[method-assign]
        vocoder.run_bucket, fullgraph=True, dynamic=False, backend=backend
    )
    for frames, graphs in ((20, 1), (9, 1), (50, 2)):
        mel = torch.randn(1, 80, frames)
        torch.manual_seed(2)
        got, _ = vocoder.inference(mel)
        assert backend.graphs == graphs, f"{frames} frames"
        torch.manual_seed(2)
        torch.testing.assert_close(got, eager.inference(mel)[0], rtol=0, atol=1e-6)
    torch._dynamo.reset()
