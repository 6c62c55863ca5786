"""S3Gen's vocoder (HiFT) with its convolutions as one region of bucketed shapes; ``stft``/``istft`` outside it.

``HiFTGenerator.inference`` runs on mel spans whose length changes with every chunk. Here the span is padded to one
of a few :data:`VOCODER_BUCKETS` (mel frames) for the part that holds nearly all its kernels: the upsampling
transposed convolutions, the source fusion and the residual blocks, through ``conv_post``
(:func:`vocoder_convs`). The F0 predictor, the sine source (it draws random phases), the source's ``stft`` and the
closing ``istft`` run outside, on the real length.

Padding must not change a real sample. The vocoder's convolutions are centred (they look right as well as left), so
:func:`vocoder_convs` multiplies every convolution's input by the mask of real positions at that rate: past the end
each convolution then reads the zeros that upstream's own padding gives it, and the kept frames equal the unpadded
call's (up to float summation order). The source's ``stft`` is taken on the real length, then padded, because its
reflection padding at the end would differ.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final

import torch
import torch._dynamo
import torch.nn.functional as F

from .turbo_flow import choose_bucket

logger = logging.getLogger(__name__)

#: Padded mel spans in frames (50 a second). A streamed chunk is 8 to 128 tokens (16 to 256 frames) plus up to 6
#: frames of left context and, at a piece's end, the 3 lookahead tokens' 6 frames.
VOCODER_BUCKETS: Final = (32, 64, 128, 192, 288, 416, 576)


def _resblock(block: Any, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """HiFT's ResBlock with each convolution's input masked (Snake(0) = 0, so masking after it is the same)."""
    for c1, c2, a1, a2 in zip(block.convs1, block.convs2, block.activations1, block.activations2, strict=True):
        x = x + c2(a2(c1(a1(x) * mask)) * mask)
    return x


def vocoder_convs(
    hift: Any, mel: torch.Tensor, s_stft: torch.Tensor, masks: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``HiFTGenerator.decode`` up to the ``istft``: magnitude and phase (1, n_fft/2+1, frames) from a padded mel
    (1, 80, N) and the source's padded stft. ``masks``: real positions at the mel rate, then after each upsampling."""
    x = hift.conv_pre(mel * masks[0])
    last = hift.num_upsamples - 1
    for i in range(hift.num_upsamples):
        x = hift.ups[i](F.leaky_relu(x, hift.lrelu_slope) * masks[i])
        if i == last:
            x = hift.reflection_pad(x)
        mask = masks[i + 1]
        x = x + _resblock(hift.source_resblocks[i], hift.source_downs[i](s_stft) * mask, mask)
        total = _resblock(hift.resblocks[i * hift.num_kernels], x, mask)
        for j in range(1, hift.num_kernels):
            total = total + _resblock(hift.resblocks[i * hift.num_kernels + j], x, mask)
        x = total / hift.num_kernels
    x = hift.conv_post(F.leaky_relu(x) * masks[-1])
    half = hift.istft_params["n_fft"] // 2 + 1
    return torch.exp(x[:, :half, :]), torch.sin(x[:, half:, :])


class BucketedVocoder:
    """``HiFTGenerator.inference`` with :func:`vocoder_convs` on bucketed shapes (compiled when asked)."""

    def __init__(
        self,
        hift: Any,
        buckets: Sequence[int] = VOCODER_BUCKETS,
        compile_mode: str | None = None,
        backend: str | Callable[..., Any] = "inductor",
    ) -> None:
        self.hift = hift
        # HiFT builds its source convolutions' strides and paddings from numpy integers (np.cumprod), which dynamo
        # turns into tensors it then cannot guard; the same values as Python ints change nothing else.
        for conv in hift.source_downs:
            conv.stride = tuple(int(v) for v in conv.stride)
            conv.padding = tuple(int(v) for v in conv.padding)
            conv.kernel_size = tuple(int(v) for v in conv.kernel_size)
        self.buckets = tuple(sorted(buckets))
        param = next(hift.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.hop = int(hift.istft_params["hop_len"])
        self.rates = [1]
        for rate in hift.ups:
            self.rates.append(self.rates[-1] * int(rate.stride[0]))
        self.samples_per_frame = self.rates[-1] * self.hop
        self._positions = torch.arange(self.rates[-1] * self.buckets[-1] + 1, device=self.device)
        self._length = torch.zeros((), dtype=torch.long, device=self.device)
        self._mel_bufs: dict[int, torch.Tensor] = {}
        self._stft_bufs: dict[int, torch.Tensor] = {}
        #: Bucket -> its CUDA graph and the (magnitude, phase) it writes (:meth:`capture`; empty until then).
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._outputs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.fallbacks = 0
        self.calls: Counter[int] = Counter()
        self.compiled = compile_mode is not None
        self._convs: Callable[..., tuple[torch.Tensor, torch.Tensor]] = vocoder_convs
        if compile_mode is not None:
            limit = max(int(torch._dynamo.config.recompile_limit), len(self.buckets) + 2)
            torch._dynamo.config.recompile_limit = limit
            options: dict[str, Any] = {"fullgraph": True, "dynamic": False, "backend": backend}
            if backend == "inductor":
                options["mode"] = None if compile_mode == "default" else compile_mode
            self._convs = torch.compile(vocoder_convs, **options)

    def masks(self, padded: int) -> list[torch.Tensor]:
        """Real positions at each rate of a span padded to ``padded`` frames, from the length tensor (device work
        only: it is part of a captured bucket)."""
        positions = self._positions
        if positions.shape[0] < self.rates[-1] * padded + 1:  # the over-long fallback only
            positions = torch.arange(self.rates[-1] * padded + 1, device=self.device)
        out = [(positions[: rate * padded] < rate * self._length).to(self.dtype).view(1, 1, -1) for rate in self.rates]
        # The last upsampling is followed by a one-sample reflection pad on the left: one position more.
        out[-1] = (positions[: self.rates[-1] * padded + 1] < self.rates[-1] * self._length + 1).to(self.dtype)
        out[-1] = out[-1].view(1, 1, -1)
        return out

    def run_bucket(self, padded: int, compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The convolutions on the bucket's buffers (masks included): what a bucket's CUDA graph records."""
        convs = self._convs if compiled else vocoder_convs
        if compiled:
            torch.compiler.cudagraph_mark_step_begin()  # type: ignore[no-untyped-call]  # see BucketedFlow.mels
        return convs(self.hift, self._mel_bufs[padded], self._stft_bufs[padded], self.masks(padded))

    @torch.inference_mode()
    def inference(
        self, speech_feat: torch.Tensor, cache_source: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio (1, samples) and the source signal, as ``HiFTGenerator.inference`` returns them."""
        hift = self.hift
        frames = int(speech_feat.shape[2])
        f0 = hift.f0_predictor(speech_feat)
        source, _, _ = hift.m_source(hift.f0_upsamp(f0[:, None]).transpose(1, 2))
        source = source.transpose(1, 2)
        if cache_source is not None and cache_source.shape[2]:
            source[:, :, : cache_source.shape[2]] = cache_source
        real, imag = hift._stft(source.squeeze(1))
        s_stft = torch.cat([real, imag], dim=1)  # (1, n_fft + 2, rate * frames + 1)
        bucket = choose_bucket(frames, self.buckets)
        if bucket is None:
            self.fallbacks += 1
            logger.warning("turbo vocoder: a span of %d frames exceeds the largest bucket: unpadded", frames)
        padded = bucket or frames
        self.calls[bucket or 0] += 1
        mel = self._buffer(self._mel_bufs, padded, (1, speech_feat.shape[1], padded))
        mel[:, :, :frames] = speech_feat
        mel[:, :, frames:] = 0
        spec_frames = self.rates[-1] * padded + 1
        spec = self._buffer(self._stft_bufs, padded, (1, s_stft.shape[1], spec_frames))
        spec[:, :, : s_stft.shape[2]] = s_stft
        spec[:, :, s_stft.shape[2] :] = 0
        self._length.fill_(frames)
        graph = self.graphs.get(padded) if bucket is not None else None
        if graph is not None:
            graph.replay()
            magnitude, phase = self._outputs[padded]
        else:
            magnitude, phase = self.run_bucket(padded, compiled=self.compiled and bucket is not None)
        keep = s_stft.shape[2]
        # Copies: the next replay of this bucket, or of any graph sharing its memory pool, may rewrite its outputs.
        wav = hift._istft(magnitude[:, :, :keep].clone(), phase[:, :, :keep].clone())
        return torch.clamp(wav, -hift.audio_limit, hift.audio_limit), source

    def _buffer(self, bufs: dict[int, torch.Tensor], key: int, shape: tuple[int, ...]) -> torch.Tensor:
        buf = bufs.get(key)
        if buf is None:
            buf = bufs[key] = torch.zeros(shape, dtype=self.dtype, device=self.device)
        return buf

    @torch.inference_mode()
    def capture(self, pool: Any) -> dict[int, float]:
        """Record one CUDA graph per bucket with ``torch.cuda.CUDAGraph`` (GPU only; before READY): largest first,
        into the shared ``pool``, each run twice on a side stream first. Seconds per bucket."""
        spent: dict[int, float] = {}
        channels = int(self.hift.istft_params["n_fft"]) + 2
        for bucket in sorted(self.buckets, reverse=True):
            if bucket in self.graphs:  # a second warm-up (scripts/gpu_run.py's, after swapping T3) keeps them
                continue
            started = time.perf_counter()
            self._buffer(self._mel_bufs, bucket, (1, 80, bucket)).zero_()
            self._buffer(self._stft_bufs, bucket, (1, channels, self.rates[-1] * bucket + 1)).zero_()
            self._length.fill_(bucket)
            side = torch.cuda.Stream()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self.run_bucket(bucket)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                outputs = self.run_bucket(bucket)
            self._outputs[bucket] = outputs  # kept: their memory must not go back to the pool
            self.graphs[bucket] = graph
            torch.cuda.synchronize()
            spent[bucket] = time.perf_counter() - started
        return spent

    def warm(self) -> dict[int, float]:
        """Run (and so compile, with ``compile_mode``) every bucket once; seconds per bucket."""
        spent: dict[int, float] = {}
        for bucket in self.buckets:
            started = time.perf_counter()
            self.inference(torch.zeros(1, 80, bucket, dtype=self.dtype, device=self.device))
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            spent[bucket] = time.perf_counter() - started
        return spent
