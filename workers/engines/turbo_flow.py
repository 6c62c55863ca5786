"""S3Gen's flow (token encoder + meanflow CFM) on padded, bucketed shapes, with no host work inside a step.

Upstream's ``CausalMaskedDiffWithXvec.inference`` builds its masks from the lengths on every call, checks them with a
``.item()`` (``add_optional_chunk_mask``), concatenates the voice's prompt to the tokens, projects the speaker
embedding and places the prompt's mel frames, all per call and with shapes that change with every token. A CUDA
graph cannot hold any of that, and ``torch.compile(fullgraph=True)`` refuses it for the same reasons. Here:

* the token sequence (the voice's prompt tokens, then the speech tokens) is padded up to one of a few
  :data:`FLOW_BUCKETS`; everything inside a step has the bucket's shapes, whatever the real length;
* the padding masks, the attention bias and the timesteps are built on the device *outside* the step, from a device
  tensor holding the length (one small copy per call, no sync);
* what depends only on the voice (its projected speaker embedding, its prompt tokens, its prompt's mel frames placed
  in a bucket-sized ``cond``) is computed once per voice and kept with the voice's conditioning
  (:meth:`BucketedFlow.voice`);
* the encoder and one CFM step are plain functions of tensors (:func:`encode`, :func:`cfm_step`) that the installed
  modules run unchanged inside; a bucket's whole pass (:meth:`BucketedFlow.run_bucket`: masks, encoder, steps) reads
  only the bucket's own input buffers, so on a GPU it is recorded once per bucket as a CUDA graph before READY
  (:meth:`BucketedFlow.capture`, ``torch.cuda.CUDAGraph`` directly) and replayed. On the CPU, ``torch.compile``
  with ``fullgraph=True`` (``compile_mode``) proves the same functions free of host syncs.

The padded sequence gives the same mel as the unpadded one: every layer after the padding is causal (the decoder's
convolutions, the encoder's upsampling), per position (feed-forwards, norms) or masked (attention keys), and the
one look-ahead convolution sees zeros past the end exactly as upstream's own zero padding gives it.
A sequence longer than the largest bucket runs the same functions unpadded, eagerly (:attr:`BucketedFlow.fallbacks`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final

import torch
import torch._dynamo
import torch.nn.functional as F

logger = logging.getLogger(__name__)

#: Padded lengths in tokens (prompt + speech + lookahead). A voice's prompt is at most 250 tokens (10 s at 25 Hz) and
#: a piece at most ``ZSYNTH_TURBO_MAX_TOKENS`` (1000) + 3: the largest bucket covers both.
FLOW_BUCKETS: Final = (256, 320, 384, 512, 640, 768, 1024, 1280)
FRAMES_PER_TOKEN: Final = 2
MEANFLOW_STEPS: Final = 2  # upstream's n_cfm_timesteps for the meanflow decoder


def choose_bucket(length: int, buckets: Sequence[int] = FLOW_BUCKETS) -> int | None:
    """The smallest bucket that holds ``length`` tokens, or None when none does (the eager fallback)."""
    for bucket in buckets:
        if length <= bucket:
            return bucket
    return None


@dataclasses.dataclass(slots=True)
class VoiceFlow:
    """What the flow needs of one voice, computed once: on the device, in the flow's dtype."""

    prompt_token: torch.Tensor  # (1, P) long
    prompt_frames: int  # F: mel frames of the reference (upstream's mel_len1)
    spks: torch.Tensor  # (1, 80): the speaker embedding, normalised and projected
    prompt_feat: torch.Tensor  # (1, 80, F)
    conds: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)  # bucket -> (1, 80, 2 * bucket)

    @property
    def prompt_len(self) -> int:
        return int(self.prompt_token.shape[1])

    def cond(self, frames: int) -> torch.Tensor:
        """The prompt's mel frames at the front of a ``frames``-long zero tensor (built once per bucket)."""
        cond = self.conds.get(frames)
        if cond is None:
            cond = torch.zeros(1, self.prompt_feat.shape[1], frames, dtype=self.spks.dtype, device=self.spks.device)
            cond[:, :, : self.prompt_frames] = self.prompt_feat
            self.conds[frames] = cond
        return cond


@dataclasses.dataclass(frozen=True, slots=True)
class FlowInputs:
    """One call's padded inputs, all on the device (built outside the compiled step)."""

    tokens: torch.Tensor  # (1, L) long, zero past the length
    token_mask: torch.Tensor  # (1, L, 1) float: 1 on real tokens
    enc_mask: torch.Tensor  # (1, 1, L) bool
    mel_mask: torch.Tensor  # (1, 1, 2L) float
    up_mask: torch.Tensor  # (1, 1, 2L) bool
    bias: torch.Tensor  # (1, 1, 2L) additive attention bias: 0 on real frames, -1e10 on padding


@dataclasses.dataclass(frozen=True, slots=True)
class BucketInputs:
    """One bucket's input buffers on the device: each call copies its inputs in (a captured graph reads them)."""

    tokens: torch.Tensor  # (1, L) long: the prompt's tokens, the speech tokens, zeros
    noise: torch.Tensor  # (1, 80, 2L): the flow's starting point
    spks: torch.Tensor  # (1, 80): the voice's projected speaker embedding
    cond: torch.Tensor  # (1, 80, 2L): the voice's prompt frames, zeros after them


# ----- the step functions (tensors in, tensors out: what gets compiled) ---------------------------------------------


def encode(flow: Any, inputs: FlowInputs) -> torch.Tensor:
    """Token ids to the decoder's ``mu`` (1, 80, 2L): upstream's embedding and conformer encoder for full-context
    decoding, with the padding masks given instead of derived (so no ``.item()`` check runs)."""
    enc = flow.encoder
    xs = flow.input_embedding(inputs.tokens) * inputs.token_mask
    xs, pos_emb, _ = enc.embed(xs, inputs.enc_mask)
    # The linear embedding turns padded zeros into its bias; the look-ahead convolution must see zeros past the end,
    # as it does in an unpadded call.
    xs = enc.pre_lookahead_layer(xs * inputs.token_mask)
    xs = enc.forward_layers(xs, inputs.enc_mask, pos_emb, inputs.enc_mask)
    up = enc.up_layer  # upstream's Upsample1D without its length bookkeeping: nearest x2, left pad, convolution
    xs = F.interpolate(xs.transpose(1, 2), scale_factor=float(up.stride), mode="nearest")
    xs = up.conv(F.pad(xs, (2 * up.stride, 0)))
    xs, pos_emb, _ = enc.up_embed(xs.transpose(1, 2), inputs.up_mask)
    xs = enc.forward_up_layers(xs, inputs.up_mask, pos_emb, inputs.up_mask)
    if enc.normalize_before:
        xs = enc.after_norm(xs)
    mu: torch.Tensor = flow.encoder_proj(xs).transpose(1, 2)
    return mu


def _attend(blocks: Any, x: torch.Tensor, bias: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
    h = x.transpose(1, 2)
    for block in blocks:
        h = block(hidden_states=h, attention_mask=bias, timestep=temb)
    return h.transpose(1, 2)


def estimate(
    est: Any,
    x: torch.Tensor,
    mu: torch.Tensor,
    t: torch.Tensor,
    r: torch.Tensor,
    spks: torch.Tensor,
    cond: torch.Tensor,
    mask: torch.Tensor,
    bias: torch.Tensor,
) -> torch.Tensor:
    """``ConditionalDecoder.forward`` (one level, as S3Gen builds it) with its attention bias given."""
    temb = est.time_mlp(est.time_embeddings(t).to(t.dtype))
    if est.meanflow:
        remb = est.time_mlp(est.time_embeddings(r).to(t.dtype))
        temb = est.time_embed_mixer(torch.cat([temb, remb], dim=1))
    h = torch.cat([x, mu, spks.unsqueeze(-1).expand(-1, -1, x.shape[-1]), cond], dim=1)
    skips = []
    for resnet, blocks, down in est.down_blocks:
        h = _attend(blocks, resnet(h, mask, temb), bias, temb)
        skips.append(h)
        h = down(h * mask)
    for resnet, blocks in est.mid_blocks:
        h = _attend(blocks, resnet(h, mask, temb), bias, temb)
    for resnet, blocks, up in est.up_blocks:
        skip = skips.pop()
        h = torch.cat([h[:, :, : skip.shape[-1]], skip], dim=1)
        h = up(_attend(blocks, resnet(h, mask, temb), bias, temb) * mask)
    h = est.final_block(h, mask)
    out: torch.Tensor = est.final_proj(h * mask) * mask
    return out


def cfm_step(
    est: Any,
    x: torch.Tensor,
    mu: torch.Tensor,
    t: torch.Tensor,
    r: torch.Tensor,
    spks: torch.Tensor,
    cond: torch.Tensor,
    mask: torch.Tensor,
    bias: torch.Tensor,
) -> torch.Tensor:
    """One meanflow Euler step from time ``t`` to ``r`` (upstream's ``basic_euler`` body)."""
    return x + (r - t) * estimate(est, x, mu, t, r, spks, cond, mask, bias)


# ----- the runner ----------------------------------------------------------------------------------------------------


class BucketedFlow:
    """Runs S3Gen's flow on bucketed shapes: eagerly, compiled per bucket when ``compile_mode`` is given (the CPU
    proofs), or replaying the CUDA graphs :meth:`capture` recorded (the GPU)."""

    def __init__(
        self,
        flow: Any,
        buckets: Sequence[int] = FLOW_BUCKETS,
        compile_mode: str | None = None,
        backend: str | Callable[..., Any] = "inductor",
    ) -> None:
        est = flow.decoder.estimator
        if len(est.down_blocks) != 1:
            raise ValueError("BucketedFlow handles S3Gen's one-level decoder only")
        self.flow = flow
        self.est = est
        self.buckets = tuple(sorted(buckets))
        param = next(flow.parameters())
        self.device, self.dtype = param.device, param.dtype
        # The encoder's relative position table is a plain attribute, not a buffer: ``.to(device)`` leaves it on
        # the CPU and each forward pass moves it. Inside a compiled region that CPU input stops the CUDA graph
        # ("skipping cudagraphs due to cpu device", the first H100 run), so it is moved here, once.
        for module in flow.modules():
            table = getattr(module, "pe", None)
            if isinstance(table, torch.Tensor) and (table.device != self.device or table.dtype != self.dtype):
                module.pe = table.to(device=self.device, dtype=self.dtype)
        #: Per-bucket device tensors made once: positions (tokens and frames).
        self._positions = torch.arange(2 * self.buckets[-1], device=self.device)
        span = torch.linspace(0, 1, MEANFLOW_STEPS + 1, device=self.device, dtype=self.dtype)
        self._times = [(span[i : i + 1].clone(), span[i + 1 : i + 2].clone()) for i in range(MEANFLOW_STEPS)]
        self._length = torch.zeros((), dtype=torch.long, device=self.device)
        self._statics: dict[int, BucketInputs] = {}
        #: Bucket -> its CUDA graph and the output tensor the graph writes (:meth:`capture`; empty until then).
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._outputs: dict[int, torch.Tensor] = {}
        self._voices: dict[int, VoiceFlow] = {}
        self.voices_built = 0
        self.fallbacks = 0
        self.calls: Counter[int] = Counter()  # bucket -> calls (0: the unpadded fallback)
        self.compiled = compile_mode is not None
        self._step: Callable[..., torch.Tensor] = cfm_step
        self._encode: Callable[..., torch.Tensor] = encode
        if compile_mode is not None:
            # One graph per bucket and function: allow them all (dynamo's default stops recompiling at 8).
            limit = max(int(torch._dynamo.config.recompile_limit), 2 * len(self.buckets) + 2)
            torch._dynamo.config.recompile_limit = limit
            mode = None if compile_mode == "default" else compile_mode
            options: dict[str, Any] = {"fullgraph": True, "dynamic": False, "backend": backend}
            if backend == "inductor":
                options["mode"] = mode
            self._step = torch.compile(cfm_step, **options)
            self._encode = torch.compile(encode, **options)

    # ----- voices ---------------------------------------------------------------------------------------------

    def voice(self, conds: Any) -> VoiceFlow:
        """The voice's flow inputs, built on first use and kept while ``conds`` (its Conditionals) lives."""
        key = id(conds)
        cached = self._voices.get(key)
        if cached is not None:
            return cached
        prepared = self.prepare(conds.gen)
        self._voices[key] = prepared
        weakref.finalize(conds, self._voices.pop, key, None)  # the conditioning cache evicted it: so does this
        self.voices_built += 1
        return prepared

    @torch.inference_mode()
    def prepare(self, gen: dict[str, Any]) -> VoiceFlow:
        """Project the speaker embedding and move the prompt onto the device, in the flow's dtype."""
        embedding = gen["embedding"].to(self.device, self.dtype).reshape(1, -1)  # batch size 1 throughout
        spks = self.flow.spk_embed_affine_layer(F.normalize(embedding, dim=1))
        prompt_token = gen["prompt_token"].to(self.device).long().reshape(1, -1)
        feat = gen["prompt_feat"].to(self.device, self.dtype)  # (1, F, 80)
        feat = feat if feat.dim() == 3 else feat.unsqueeze(0)
        return VoiceFlow(
            prompt_token=prompt_token,
            prompt_frames=int(feat.shape[1]),
            spks=spks,
            prompt_feat=feat.transpose(1, 2).contiguous(),
        )

    # ----- one call -------------------------------------------------------------------------------------------

    def bucket_for(self, voice: VoiceFlow, n_tokens: int) -> int | None:
        """The bucket a call with ``n_tokens`` speech tokens runs in (None: over-long, unpadded and eager)."""
        return choose_bucket(voice.prompt_len + n_tokens, self.buckets)

    def masks(self, tokens: torch.Tensor, padded: int) -> FlowInputs:
        """Every mask of a call padded to ``padded`` tokens, built on the device from the length tensor (device
        work only: it is part of a captured bucket)."""
        positions = self._positions
        if positions.shape[0] < 2 * padded:  # the over-long fallback only
            positions = torch.arange(2 * padded, device=self.device)
        valid = positions[:padded] < self._length
        frames = positions[: 2 * padded] < 2 * self._length
        mel_mask = frames.to(self.dtype).view(1, 1, -1)
        return FlowInputs(
            tokens=tokens,
            token_mask=valid.to(self.dtype).view(1, -1, 1),
            enc_mask=valid.view(1, 1, -1),
            mel_mask=mel_mask,
            up_mask=frames.view(1, 1, -1),
            bias=(1.0 - mel_mask) * -1.0e10,  # upstream's mask_to_bias
        )

    def statics(self, padded: int) -> BucketInputs:
        """The bucket's input buffers, made once: a captured graph reads them at fixed addresses."""
        bufs = self._statics.get(padded)
        if bufs is None:
            with torch.inference_mode():  # the tensor kind every call sees, whoever asks first
                bufs = self._statics[padded] = BucketInputs(
                    tokens=torch.zeros(1, padded, dtype=torch.long, device=self.device),
                    noise=torch.zeros(1, 80, 2 * padded, dtype=self.dtype, device=self.device),
                    spks=torch.zeros(1, 80, dtype=self.dtype, device=self.device),
                    cond=torch.zeros(1, 80, 2 * padded, dtype=self.dtype, device=self.device),
                )
        return bufs

    def run_bucket(self, bufs: BucketInputs, padded: int, compiled: bool = False) -> torch.Tensor:
        """The whole pass on the bucket's buffers: masks, encoder, the meanflow steps; the mel (1, 80, 2 * padded).

        Device work only, so it is what a bucket's CUDA graph records (:meth:`capture`). ``compiled``: the encoder
        and the step are torch.compile'd (the CPU proofs), whose CUDA graph trees reuse an output's memory on the
        next replay, so each output is copied out first.
        """
        step, enc = (self._step, self._encode) if compiled else (cfm_step, encode)
        inputs = self.masks(bufs.tokens, padded)
        if compiled:
            torch.compiler.cudagraph_mark_step_begin()  # type: ignore[no-untyped-call]  # unannotated upstream
        mu = enc(self.flow, inputs)
        if compiled:
            mu = mu.clone()
        x = bufs.noise
        for t, r in self._times:
            x = step(self.est, x, mu, t, r, bufs.spks, bufs.cond, inputs.mel_mask, inputs.bias)
            if compiled:
                x = x.clone()
        return x

    @torch.inference_mode()
    def mels(self, voice: VoiceFlow, speech: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Mel frames (1, 80, 2T - F + 2P) of the speech tokens ``speech`` (1, T) after the voice's prompt.

        ``noise`` (1, 80, >= 2 * padded length) is the starting point of the flow for every frame, prompt included
        (upstream draws the prompt's share anew each call; a fixed draw keeps re-decoded prefixes stable).
        """
        total = voice.prompt_len + int(speech.shape[1])
        bucket = choose_bucket(total, self.buckets)
        if bucket is None:
            self.fallbacks += 1
            logger.warning("turbo flow: %d tokens exceed the largest bucket (%d): unpadded", total, self.buckets[-1])
        padded = bucket or total
        self.calls[bucket or 0] += 1
        frames = 2 * padded
        if noise.shape[2] < frames:
            noise = F.pad(noise, (0, frames - noise.shape[2]))
        # The call's inputs go into the bucket's own buffers (device copies, no sync): the same shapes, strides and
        # tensor kind every call, and on a GPU the addresses its captured graph reads.
        bufs = self.statics(padded) if bucket is not None else self._fallback_inputs(padded)
        bufs.tokens[:, : voice.prompt_len] = voice.prompt_token
        bufs.tokens[:, voice.prompt_len : total] = speech.to(self.device)
        bufs.tokens[:, total:] = 0
        bufs.noise.copy_(noise[:, :, :frames])
        bufs.spks.copy_(voice.spks)
        bufs.cond.copy_(voice.cond(frames))
        self._length.fill_(total)
        graph = self.graphs.get(padded) if bucket is not None else None
        if graph is not None:
            graph.replay()
            x = self._outputs[padded]
        else:
            x = self.run_bucket(bufs, padded, compiled=self.compiled and bucket is not None)
        # A copy: the next replay of this bucket, or of any graph sharing its memory pool, may rewrite its output.
        return x[:, :, voice.prompt_frames : 2 * total].clone()

    def _fallback_inputs(self, padded: int) -> BucketInputs:
        return BucketInputs(
            tokens=torch.zeros(1, padded, dtype=torch.long, device=self.device),
            noise=torch.empty(1, 80, 2 * padded, dtype=self.dtype, device=self.device),
            spks=torch.empty(1, 80, dtype=self.dtype, device=self.device),
            cond=torch.empty(1, 80, 2 * padded, dtype=self.dtype, device=self.device),
        )

    @torch.inference_mode()
    def capture(self, pool: Any) -> dict[int, float]:
        """Record one CUDA graph per bucket with ``torch.cuda.CUDAGraph`` (GPU only; before READY): largest bucket
        first, all into ``pool`` (``torch.cuda.graph_pool_handle()``) so the smaller ones reuse its memory, each
        run twice on a side stream first (cuBLAS and cuDNN set up outside capture). A graph serves every voice: the
        voice's share is in the buffers it reads. Seconds per bucket."""
        spent: dict[int, float] = {}
        for bucket in sorted(self.buckets, reverse=True):
            if bucket in self.graphs:  # a second warm-up (scripts/gpu_run.py's, after swapping T3) keeps them
                continue
            started = time.perf_counter()
            bufs = self.statics(bucket)
            for buf in (bufs.tokens, bufs.noise, bufs.spks, bufs.cond):
                buf.zero_()
            self._length.fill_(bucket)
            side = torch.cuda.Stream()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self.run_bucket(bufs, bucket)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                out = self.run_bucket(bufs, bucket)
            self._outputs[bucket] = out  # kept: its memory must not go back to the pool
            self.graphs[bucket] = graph
            torch.cuda.synchronize()
            spent[bucket] = time.perf_counter() - started
        return spent

    # ----- before READY ---------------------------------------------------------------------------------------

    def warm(self, voice: VoiceFlow, buckets: Sequence[int] | None = None) -> dict[int, float]:
        """Run (and so compile, with ``compile_mode``) every bucket once; seconds per bucket."""
        spent: dict[int, float] = {}
        for bucket in buckets or self.buckets:
            n = bucket - voice.prompt_len
            if n <= 0:
                continue
            started = time.perf_counter()
            speech = torch.zeros(1, n, dtype=torch.long, device=self.device)
            self.mels(voice, speech, torch.zeros(1, 80, 2 * bucket, device=self.device))
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            spent[bucket] = time.perf_counter() - started
        return spent
