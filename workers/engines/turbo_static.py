"""T3's speech-token loop on a static KV cache, one CUDA graph per attention length, no host sync per token.

The upstream loop (``T3.inference_turbo``) grows HF's dynamic cache, runs the logit processors on a growing token
history and reads every token back to the host (``torch.all(scores == -inf)`` and the stop check), so the GPU waits
for Python on every token. :class:`StaticT3` runs the same GPT-2 backbone and heads from the same weights, with:

* a KV cache allocated once (``max_len`` positions) that prefill and each step write in place;
* a decode step of fixed shapes: the attention reads the cache up to a *bucket* (a multiple of ``BUCKET``
  positions), so one CUDA graph per bucket covers every length; :meth:`StaticT3.capture` records them all before
  the worker says READY;
* the sampler of :func:`sample_next` (temperature, top-k, top-p, repetition penalty over a fixed-size "seen" mask,
  then an exponential race instead of ``torch.multinomial``: the same distribution, no data-dependent shapes);
* tokens written to a device buffer and read back once per block (a streamed chunk's worth), where the stop token is
  looked for; steps computed past a stop token are dropped.

On the CPU (or with graphs off) the same step runs eagerly. :func:`iter_speech_tokens_reference` is the HF-cache loop
with the same sampler: the tests check that both give the same tokens from the same seed.

**Several streams, one set of buffers.** A worker may hold several open streams and advance them in turn (one block
of one stream at a time). Each :meth:`StaticT3.generate` belongs to a :class:`T3Stream`; before it touches the
static buffers it makes its stream the *resident* one (:meth:`StaticT3.activate`): the stream resident until then
has its state copied out (the small tensors, and the cache positions it wrote since it was last copied out), and the
new one's copied in (the small tensors and its whole written prefix). The buffers and the graphs captured on them are
shared; a stream costs its own copy of the cache, and a switch costs device-to-device copies, no host sync. A stream
that runs alone never copies anything.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

BUCKET: Final = 256  # attention lengths are rounded up to this: one graph per bucket
# Prefill never exceeds this: 1 speaker token + 375 prompt tokens + a 300-character piece's text tokens + start.
PREFILL_MAX: Final = 704


def processed_scores(
    logits: torch.Tensor,
    seen: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    penalty: torch.Tensor,
    top_k: int,
) -> torch.Tensor:
    """Upstream's logit processors in upstream's order, on fixed shapes: temperature, top-k, top-p, then the
    repetition penalty on every token in ``seen`` (the set of tokens so far, which is what HF's gather/scatter
    penalty amounts to). ``logits`` (1, V) in any dtype; float32 scores back.

    One selection of the vocabulary, not two sorts: after top-k only the k best can survive, so top-p's ordering is
    the k values ``torch.topk`` already returns sorted (read in ascending order, as HF's processor sorts; the tokens
    top-k removed add exact zeros to its cumulative sum). Only without a top-k is the whole vocabulary sorted.
    """
    scores = logits.float() / temperature
    if 0 < top_k < scores.shape[-1]:
        best, order = torch.topk(scores, top_k, dim=-1)  # descending
        scores = scores.masked_fill(scores < best[..., -1:], -math.inf)
        ascending, order = best.flip(-1), order.flip(-1)
    else:
        ascending, order = torch.sort(scores, descending=False, dim=-1)
    cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative <= (1 - top_p)
    drop_sorted[..., -1:] = False  # the most likely token always stays
    drop = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, order, drop_sorted)
    scores = scores.masked_fill(drop, -math.inf)
    penalised = torch.where(scores < 0, scores * penalty, scores / penalty)
    return torch.where(seen, penalised, scores)


def sample_next(
    logits: torch.Tensor,
    seen: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    penalty: torch.Tensor,
    top_k: int,
) -> torch.Tensor:
    """One token id (shape (1, 1)) drawn from :func:`processed_scores`, with no host sync.

    An exponential race, ``argmax(p / E)`` with ``E ~ Exp(1)``, picks index i with probability p_i as
    ``torch.multinomial`` does, with fixed shapes and no check that needs the host (a row of -inf gives NaN
    probabilities, which argmax still turns into an index instead of stopping the GPU).
    """
    probs = processed_scores(logits, seen, temperature, top_p, penalty, top_k).softmax(dim=-1)
    race = torch.empty_like(probs).exponential_()
    return torch.argmax(probs / race, dim=-1, keepdim=True)


@dataclasses.dataclass(eq=False)
class T3Stream:
    """One stream's T3 state while another stream's is on the static buffers (see the module docstring).

    ``filled`` cache positions, from 0, hold this stream's keys and values (on the static buffers while it is
    resident); the first ``saved`` of them are also in its own ``k``/``v`` copy, which is made on its first switch out.
    """

    small: list[torch.Tensor] | None = None  # its copies of StaticT3.small_state(), in that order
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    filled: int = 0
    saved: int = 0


class StaticT3:
    """T3's backbone and speech heads over a static KV cache (see the module docstring)."""

    def __init__(
        self,
        t3: Any,
        max_tokens: int,
        dtype: torch.dtype | None = None,
        graphs: bool = True,
        bucket: int = BUCKET,
        top_k: int = 1000,
    ) -> None:
        tfmr = t3.tfmr
        cfg = tfmr.config
        self.t3 = t3
        self.device = next(t3.parameters()).device
        self.dtype = dtype or next(tfmr.parameters()).dtype
        own = self.dtype != next(tfmr.parameters()).dtype
        # Reduced precision gets its own copies, so T3's conditioning encoders (fp32 inputs) stay as they are.
        self.tfmr = copy.deepcopy(tfmr).to(self.dtype) if own else tfmr
        self.head = copy.deepcopy(t3.speech_head).to(self.dtype) if own else t3.speech_head
        self.emb = copy.deepcopy(t3.speech_emb).to(self.dtype) if own else t3.speech_emb
        self.n_head = int(cfg.n_head)
        self.head_dim = int(cfg.n_embd) // self.n_head
        self.scales = [
            (1.0 / math.sqrt(self.head_dim) if cfg.scale_attn_weights else 1.0)
            / (float(i + 1) if cfg.scale_attn_by_inverse_layer_idx else 1.0)
            for i in range(int(cfg.n_layer))
        ]
        self.max_len = min(int(cfg.n_positions), PREFILL_MAX + max_tokens)
        self.bucket = bucket
        self.vocab = int(self.head.out_features)
        self.stop = int(t3.hp.stop_speech_token)
        self.start = int(t3.hp.start_speech_token)
        self.use_graphs = graphs and self.device.type == "cuda"
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._pool: Any = None
        with torch.inference_mode():
            shape = (int(cfg.n_layer), 1, self.n_head, self.max_len, self.head_dim)
            self.k = torch.zeros(shape, dtype=self.dtype, device=self.device)
            self.v = torch.zeros(shape, dtype=self.dtype, device=self.device)
            self.positions = torch.arange(self.max_len, device=self.device)
            self.token = torch.zeros(1, 1, dtype=torch.long, device=self.device)
            self.pos = torch.zeros((), dtype=torch.long, device=self.device)  # where the next step writes
            self.step_no = torch.zeros((), dtype=torch.long, device=self.device)
            self.out = torch.zeros(self.max_len + 1, dtype=torch.long, device=self.device)
            self.seen = torch.zeros(1, self.vocab, dtype=torch.bool, device=self.device)
            self.temperature = torch.ones((), device=self.device)
            self.top_p = torch.ones((), device=self.device)
            self.penalty = torch.ones((), device=self.device)
        self.top_k = top_k  # a shape inside the graphs, so fixed for the instance
        #: The stream whose state is on the buffers now (None: nobody's, e.g. after capture).
        self.resident: T3Stream | None = None
        self.switches = 0  # times another stream's state was copied in
        self.copied_bytes = 0  # bytes those switches copied, both ways

    # ----- streams -------------------------------------------------------------------------------------------

    def small_state(self) -> list[torch.Tensor]:
        """Every static tensor besides the cache that a stream's steps read or write."""
        return [self.token, self.pos, self.step_no, self.out, self.seen, self.temperature, self.top_p, self.penalty]

    @property
    def stream_bytes(self) -> int:
        """Device memory one stream's own copy of the state takes at most: its full-length cache and the rest."""
        cache = 2 * self.k.numel() * self.k.element_size()
        return cache + sum(t.numel() * t.element_size() for t in self.small_state())

    @torch.inference_mode()
    def activate(self, stream: T3Stream) -> None:
        """Put ``stream``'s state on the static buffers, copying the resident stream's out first (no host sync)."""
        if self.resident is stream:
            return
        if self.resident is not None:
            self._save(self.resident)
        self._load(stream)
        self.resident = stream
        self.switches += 1

    def release(self, stream: T3Stream) -> None:
        """``stream`` has ended: its state needs no copying out (its own copy goes with the object)."""
        if self.resident is stream:
            self.resident = None

    def evict(self) -> None:
        """Copy the resident stream's state out, so the buffers may be used for something else (capture)."""
        if self.resident is not None:
            self._save(self.resident)
            self.resident = None

    def _save(self, stream: T3Stream) -> None:
        state = self.small_state()
        if stream.small is None:
            stream.small = [t.clone() for t in state]
        else:
            for own, t in zip(stream.small, state, strict=True):
                own.copy_(t)
        copied = sum(t.numel() * t.element_size() for t in state)
        if stream.filled > stream.saved:  # only what it wrote since its last switch out
            if stream.k is None or stream.v is None:
                stream.k, stream.v = torch.empty_like(self.k), torch.empty_like(self.v)
            span = slice(stream.saved, stream.filled)
            stream.k[:, :, :, span].copy_(self.k[:, :, :, span])
            stream.v[:, :, :, span].copy_(self.v[:, :, :, span])
            copied += 2 * self._position_bytes * (stream.filled - stream.saved)
            stream.saved = stream.filled
        self.copied_bytes += copied

    def _load(self, stream: T3Stream) -> None:
        if stream.small is None:  # a new stream: generate() sets everything it reads before reading it
            return
        for t, own in zip(self.small_state(), stream.small, strict=True):
            t.copy_(own)
        copied = sum(t.numel() * t.element_size() for t in stream.small)
        if stream.filled and stream.k is not None and stream.v is not None:
            span = slice(0, stream.filled)  # == saved: it was copied out when it left
            self.k[:, :, :, span].copy_(stream.k[:, :, :, span])
            self.v[:, :, :, span].copy_(stream.v[:, :, :, span])
            copied += 2 * self._position_bytes * stream.filled
        self.copied_bytes += copied

    @property
    def _position_bytes(self) -> int:
        """Bytes of one cache position in one of K or V, over all layers."""
        return self.k.numel() // self.max_len * self.k.element_size()

    # ----- the transformer ------------------------------------------------------------------------------------

    def _layers(self, x: torch.Tensor, write: Callable[[int, torch.Tensor, torch.Tensor], tuple[Any, Any, Any]]) -> Any:
        """Run the GPT-2 blocks on ``x``; ``write`` stores a layer's new K/V and returns (keys, values, mask)."""
        for i, block in enumerate(self.tfmr.h):
            h = block.ln_1(x)
            q, k, v = block.attn.c_attn(h).split(self.n_head * self.head_dim, dim=2)
            q = q.view(1, -1, self.n_head, self.head_dim).transpose(1, 2)
            k = k.view(1, -1, self.n_head, self.head_dim).transpose(1, 2)
            v = v.view(1, -1, self.n_head, self.head_dim).transpose(1, 2)
            keys, values, mask = write(i, k, v)
            a = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, is_causal=mask is None, scale=self.scales[i]
            )
            a = a.transpose(1, 2).reshape(1, -1, self.n_head * self.head_dim)
            x = x + block.attn.c_proj(a)
            x = x + block.mlp(block.ln_2(x))
        return self.tfmr.ln_f(x)

    def prefill(self, embeds: torch.Tensor) -> torch.Tensor:
        """Fill the cache with the prompt (cond + text + start) and return the logits after it (1, V)."""
        length = embeds.shape[1]
        x = embeds.to(self.dtype) + self.tfmr.wpe(self.positions[:length]).unsqueeze(0)

        def write(i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[Any, Any, Any]:
            self.k[i, :, :, :length] = k
            self.v[i, :, :, :length] = v
            return k, v, None

        hidden = self._layers(x, write)
        logits: torch.Tensor = self.head(hidden[:, -1:])[:, -1, :]
        return logits

    def _decode(self, kv_len: int) -> None:
        """One step on the static buffers: embed ``token`` at ``pos``, attend to ``kv_len`` positions, sample."""
        x = self.emb(self.token) + self.tfmr.wpe(self.pos.view(1, 1))
        mask = (self.positions[:kv_len] <= self.pos).view(1, 1, 1, kv_len)
        where = self.pos.view(1)

        def write(i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[Any, Any, Any]:
            self.k[i].index_copy_(2, where, k)
            self.v[i].index_copy_(2, where, v)
            return self.k[i, :, :, :kv_len], self.v[i, :, :, :kv_len], mask

        hidden = self._layers(x, write)
        logits = self.head(hidden)[:, -1, :]
        self._accept(sample_next(logits, self.seen, self.temperature, self.top_p, self.penalty, self.top_k))
        self.pos.add_(1)

    def _accept(self, token: torch.Tensor) -> None:
        """Make ``token`` the current one: record it, mark it seen (all on the device)."""
        self.token.copy_(token)
        self.out.index_copy_(0, self.step_no.view(1), token.view(1))
        self.step_no.add_(1)
        self.seen.scatter_(1, token, True)

    def bucket_for(self, position: int) -> int:
        """The attention length a step writing at ``position`` runs with."""
        return min(self.max_len, (position // self.bucket + 1) * self.bucket)

    # ----- CUDA graphs ----------------------------------------------------------------------------------------

    @torch.inference_mode()
    def capture(self, pool: Any = None) -> int:
        """Record one CUDA graph per attention bucket (call before serving: capture is slow and syncs): largest
        first, into ``pool`` when given (``torch.cuda.graph_pool_handle()``, shared with S3Gen's graphs)."""
        if not self.use_graphs:
            return 0
        self.evict()  # capture writes the buffers: a stream open now keeps its state
        buckets = sorted({self.bucket_for(p) for p in range(0, self.max_len, self.bucket)}, reverse=True)
        self.pos.fill_(0)
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # cuBLAS workspaces and kernels are set up outside capture
            for kv_len in buckets:
                self.pos.fill_(kv_len - 1)
                self.step_no.fill_(0)
                self._decode(kv_len)
        torch.cuda.current_stream().wait_stream(side)
        self._pool = pool if pool is not None else self._pool
        for kv_len in buckets:
            if kv_len in self.graphs:
                continue
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                self._decode(kv_len)
            self._pool = graph.pool()
            self.graphs[kv_len] = graph
        torch.cuda.synchronize()
        return len(self.graphs)

    def _step(self, position: int) -> None:
        kv_len = self.bucket_for(position)
        graph = self.graphs.get(kv_len) if self.use_graphs else None
        if graph is not None:
            graph.replay()
        else:
            self._decode(kv_len)

    # ----- generation -----------------------------------------------------------------------------------------

    @torch.inference_mode()
    def generate(
        self,
        t3_cond: Any,
        text_tokens: torch.Tensor,
        sampling: Any,
        max_tokens: int,
        should_stop: Callable[[], bool],
        blocks: Sequence[int] = (16,),
    ) -> Iterator[int]:
        """Yield speech tokens until the stop token, ``max_tokens`` or ``should_stop()``.

        Tokens come back from the device in blocks (``blocks[0]`` first, then each later size, the last repeating):
        the only host syncs are one per block, and ``should_stop()`` is asked once per block.

        Generators of this method may be advanced in turn, each with its own state (:class:`T3Stream`); the random
        draws come from the global RNG, which the caller keeps per stream (``turbo.StreamRng``).
        """
        start = torch.full((1, 1), self.start, dtype=torch.long, device=self.device)
        embeds, _ = self.t3.prepare_input_embeds(
            t3_cond=t3_cond, text_tokens=text_tokens, speech_tokens=start, cfg_weight=0.0
        )
        length = int(embeds.shape[1])
        if length + max_tokens > self.max_len:  # a prompt beyond PREFILL_MAX (text of many tokens per character)
            logger.warning(
                "prompt of %d positions and %d speech tokens exceed the static cache of %d: this piece runs on "
                "the dynamic cache",
                length,
                max_tokens,
                self.max_len,
            )
            yield from iter_speech_tokens_reference(self.t3, t3_cond, text_tokens, sampling, max_tokens, should_stop)
            return
        if sampling.top_k != self.top_k:
            raise ValueError(f"top_k {sampling.top_k}: this decoder was built for top_k {self.top_k}")
        stream = T3Stream()  # this piece's state: nothing of it outlives the piece
        try:
            yield from self._static_tokens(stream, embeds, sampling, max_tokens, should_stop, blocks)
        finally:
            self.release(stream)

    def _static_tokens(
        self,
        stream: T3Stream,
        embeds: torch.Tensor,
        sampling: Any,
        budget: int,
        should_stop: Callable[[], bool],
        blocks: Sequence[int],
    ) -> Iterator[int]:
        """:meth:`generate` on the static cache, for ``stream``: its state is made resident before every use of the
        buffers, since other streams' generators may run while this one waits at a yield."""
        length = int(embeds.shape[1])
        self.activate(stream)
        self.temperature.fill_(sampling.temperature if sampling.temperature > 0 else 1.0)
        self.top_p.fill_(sampling.top_p)
        self.penalty.fill_(sampling.repetition_penalty)
        self.seen.zero_()
        self.seen[0, self.start] = True  # upstream's history starts with the start token
        self.step_no.zero_()
        stream.filled = length
        logits = self.prefill(embeds)
        self._accept(sample_next(logits, self.seen, self.temperature, self.top_p, self.penalty, self.top_k))
        self.pos.fill_(length)
        done = 1  # tokens sampled so far (the first came from the prefill)
        handed = 0
        block_no = 0
        while handed < budget:
            size = blocks[min(block_no, len(blocks) - 1)]
            block_no += 1
            target = min(budget, handed + size)
            self.activate(stream)  # another stream may have used the buffers while this one waited at a yield
            while done < target:
                self._step(length + done - 1)
                done += 1
            stream.filled = length + done - 1  # the prompt, then a position for every step so far
            for value in self.out[handed:target].tolist():  # the one sync of this block
                if value == self.stop:
                    return
                yield int(value)
            handed = target
            if should_stop():
                return


@torch.inference_mode()
def iter_speech_tokens_reference(
    t3: Any,
    t3_cond: Any,
    text_tokens: torch.Tensor,
    sampling: Any,
    max_tokens: int,
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[int]:
    """Upstream's loop (HF dynamic cache, one sync per token) with :func:`sample_next`: the eager reference, and
    the fallback for prompts too long for the static cache."""
    start = t3.hp.start_speech_token * torch.ones_like(text_tokens[:, :1])
    embeds, _ = t3.prepare_input_embeds(t3_cond=t3_cond, text_tokens=text_tokens, speech_tokens=start, cfg_weight=0.0)
    out = t3.tfmr(inputs_embeds=embeds, use_cache=True)
    past = out.past_key_values
    logits = t3.speech_head(out[0][:, -1:])[:, -1, :]
    vocab = logits.shape[-1]
    seen = torch.zeros(1, vocab, dtype=torch.bool, device=logits.device)
    seen[0, int(t3.hp.start_speech_token)] = True
    temperature = torch.tensor(sampling.temperature if sampling.temperature > 0 else 1.0, device=logits.device)
    top_p = torch.tensor(sampling.top_p, device=logits.device)
    penalty = torch.tensor(sampling.repetition_penalty, device=logits.device)
    for _ in range(max_tokens):
        token = sample_next(logits, seen, temperature, top_p, penalty, sampling.top_k)
        value = int(token.item())
        if value == t3.hp.stop_speech_token or should_stop():
            return
        yield value
        seen.scatter_(1, token, True)
        out = t3.tfmr(inputs_embeds=t3.speech_emb(token), past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = t3.speech_head(out[0])[:, -1, :]
