"""The GPU engine: Chatterbox-Turbo (``chatterbox-tts``), one model per worker process, one job at a time.

Weights come from ``ZSYNTH_TURBO_CHECKPOINT`` (a directory downloaded once) through the package's own
``ChatterboxTurboTTS.from_local``, on the GPU that ``CUDA_VISIBLE_DEVICES`` gives the worker; ``cpu`` only when
``ZSYNTH_TURBO_DEVICE=cpu`` asks for it. The model keeps per-request state on the instance (``conds``, the global
torch RNG), so this engine never uses ``generate()``: it passes each voice's conditioning explicitly and streams
inside each text piece (see :mod:`.turbo_stream`).

Voice settings on this engine:

* ``stability`` (0-1) sets T3's sampling temperature: 1.2 - 0.8 * stability (0.5 gives the upstream 0.8; 1.0 is
  the steadiest delivery at 0.4, 0.0 the most varied at 1.2). top_k 1000, top_p 0.95, repetition penalty 1.2.
* ``speed`` (0.7-1.2) stretches the mel frames before the vocoder (pitch kept, duration divided by speed).
* ``similarity_boost``, ``style`` and ``use_speaker_boost`` are accepted and have no effect (Turbo ignores CFG
  and exaggeration).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import time
import warnings
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np

from zsynth.core.config import Settings
from zsynth.core.text.sentences import SENTENCE_MAX_CHARS, pack_sentences, split_sentences

from .base import EngineChunk, VoiceSpec, clamp_setting, job_settings
from .turbo_ckpt import BUILTIN_CONDS, WEIGHT_FILES, backbone, backbone_config, is_random, missing_files
from .turbo_compat import TurboUnavailable, apply_workarounds, require_packages
from .turbo_voices import ConditioningCache

logger = logging.getLogger(__name__)

# Longer inputs degrade (chatterbox #424, #385); the official demo caps at 300.
PIECE_MAX_CHARS: Final = SENTENCE_MAX_CHARS
# Most text tokens T3 gets for one piece: what the static cache's prefill (turbo_static.PREFILL_MAX, 704) leaves after
# the speaker token, the 375 prompt tokens and the start token. A 300-character piece of ordinary text is about 75
# tokens; a piece that is one word of thousands of characters (the front cuts words, a job queued by other means may
# not) is cut here instead of reaching T3 whole (an unbounded prompt on the dynamic cache).
TEXT_MAX_TOKENS: Final = 704 - 1 - 375 - 1
DOWNLOAD_HINT: Final = (
    "download the weights once, e.g. `huggingface-cli download ResembleAI/chatterbox-turbo --local-dir "
    "/srv/zsynth/chatterbox-turbo`, and set ZSYNTH_TURBO_CHECKPOINT to that directory"
)
# Speech tokens of the longest voice prompt S3Gen keeps (10 s at 25 a second).
PROMPT_MAX_TOKENS: Final = 250
_TAG: Final = re.compile(r"\[[a-z ]{2,24}\]")
_VOICE_ID: Final = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_KEEP: Final = "\u2060"  # word joiner: keeps a two-word tag such as [clear throat] in one piece


def text_pieces(text: str, max_chars: int = PIECE_MAX_CHARS) -> list[str]:
    """Sentences packed into pieces of at most ``max_chars``, never cutting a word or a [tag]."""
    protected = _TAG.sub(lambda m: m.group(0).replace(" ", _KEEP), text)
    pieces = pack_sentences(split_sentences(protected, max_chars), max_chars)
    return [piece.replace(_KEEP, " ") for piece in pieces]


def text_token_ids(tokenizer: Any, piece: str) -> Any:
    """The piece's text tokens for T3 (a (1, n) tensor), at most :data:`TEXT_MAX_TOKENS` of them."""
    ids = tokenizer(piece, return_tensors="pt", truncation=True, max_length=TEXT_MAX_TOKENS).input_ids
    if ids.shape[-1] >= TEXT_MAX_TOKENS:
        logger.warning("turbo: a piece of %d characters was cut to %d text tokens", len(piece), TEXT_MAX_TOKENS)
    return ids


def chunk_schedule(first: int, largest: int) -> tuple[int, ...]:
    """Speech tokens per streamed chunk of a piece: ``first``, then doubling up to ``largest`` (which repeats).

    The first chunk is small so audio starts early; each later one doubles, so the client's buffer (the audio
    already sent) always outlasts the time the next chunk takes, while a long piece is decoded a few times instead
    of every ``first`` tokens (each flow pass costs about the same whatever its length).
    """
    sizes = [first]
    while sizes[-1] < largest:
        sizes.append(min(largest, sizes[-1] * 2))
    return tuple(sizes)


def _check_checkpoint(ckpt: Path | None) -> Path:
    if ckpt is None:
        raise TurboUnavailable(f"ZSYNTH_ENGINE=turbo needs ZSYNTH_TURBO_CHECKPOINT: {DOWNLOAD_HINT}")
    if not ckpt.is_dir():
        raise TurboUnavailable(f"ZSYNTH_TURBO_CHECKPOINT={ckpt} is not a directory: {DOWNLOAD_HINT}")
    missing = missing_files(ckpt) + ([] if (ckpt / BUILTIN_CONDS).is_file() else [BUILTIN_CONDS])
    if missing:
        raise TurboUnavailable(
            f"ZSYNTH_TURBO_CHECKPOINT={ckpt} lacks {', '.join(missing)}; it must hold the full "
            f"ResembleAI/chatterbox-turbo file set: {DOWNLOAD_HINT}"
        )
    return ckpt


def _pick_device(requested: str) -> str:
    import torch

    if requested == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else f"torch built for CUDA {torch.version.cuda}"
        raise TurboUnavailable(
            f"ZSYNTH_ENGINE=turbo found no CUDA device ({build}, CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}): run the worker on a GPU host "
            "installed with ./scripts/install-gpu, one worker per GPU; ZSYNTH_TURBO_DEVICE=cpu is for tests only"
        )
    return "cuda"


class TurboEngine:
    """Chatterbox-Turbo: 24 kHz mono, zero-shot voices from a reference clip."""

    name = "turbo"
    sample_rate = 24000

    def __init__(self, settings: Settings) -> None:
        require_packages()
        ckpt = _check_checkpoint(settings.turbo.checkpoint)
        apply_workarounds()
        import torch
        from chatterbox.tts_turbo import ChatterboxTurboTTS, Conditionals

        self.device = _pick_device(settings.turbo.device)
        if self.device == "cpu":
            torch.set_num_threads(settings.engine_thread_count)
        self.settings = settings
        #: Speech tokens per streamed chunk of a piece (the settings never change while the engine lives).
        self.schedule = chunk_schedule(settings.turbo.first_chunk_tokens, settings.turbo.chunk_tokens)
        self.random_weights = is_random(ckpt)
        started = time.monotonic()
        with backbone(backbone_config(ckpt / "t3_turbo_v1.safetensors")), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # diffusers' LoRACompatibleLinear deprecation, per layer
            self.model = ChatterboxTurboTTS.from_local(str(ckpt), self.device)
        self.builtin = self.model.conds
        from .turbo_voices import checkpoint_fingerprint

        self.voices = ConditioningCache(
            build=self._build_conds,
            load=lambda path: Conditionals.load(path, map_location=self.device).to(self.device),
            model_id=checkpoint_fingerprint(ckpt, WEIGHT_FILES),
            capacity=settings.turbo.voice_cache,
        )
        self.watermarker = self.model.watermarker if settings.turbo.watermark else None
        from .turbo_static import StaticT3

        self.dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[settings.turbo.dtype]
        # Reduced precision is a GPU option: on the CPU it only makes T3 slower.
        reduced = self.dtype if self.device == "cuda" and self.dtype != torch.float32 else None
        self.t3 = StaticT3(self.model.t3, settings.turbo.max_tokens, dtype=reduced, graphs=settings.turbo.cuda_graphs)
        from .turbo_flow import BucketedFlow
        from .turbo_vocoder import BucketedVocoder

        # S3Gen's flow and vocoder on bucketed shapes; on a GPU with graphs on, warm_up records each bucket as a
        # CUDA graph (torch.cuda.CUDAGraph directly: no dynamo tracing at every start, which took 181-272 s through
        # torch.compile's cudagraphs backend on the H100).
        self.flow = BucketedFlow(self.model.s3gen.flow)
        self.vocoder = BucketedVocoder(self.model.s3gen.mel2wav)
        where = torch.cuda.get_device_name() if self.device == "cuda" else "cpu"
        logger.info(
            "turbo engine loaded from %s on %s in %.1fs%s",
            ckpt,
            where,
            time.monotonic() - started,
            f" (RANDOM {self.random_weights} weights)" if self.random_weights else "",
        )
        logger.info(
            "turbo T3: static KV cache of %d positions in %s, CUDA graphs %s",
            self.t3.max_len,
            str(self.t3.dtype).removeprefix("torch."),
            "on" if self.t3.use_graphs else "off",
        )

    # ----- voices ----------------------------------------------------------------------------------------------

    def _build_conds(self, clip: Path) -> Any:
        """Run the package's conditioning on a clip without leaving it on the instance (engine thread only)."""
        import torch

        before = self.model.conds
        try:
            with torch.inference_mode():  # keeps CAMPPlus's autograd graph out of the cached tensors
                self.model.prepare_conditionals(str(clip), norm_loudness=True)
            return self.model.conds
        finally:
            self.model.conds = before

    def voice_dir(self, voice: VoiceSpec) -> Path | None:
        """The directory of a cloned voice, or None for the built-in voice (every id without one)."""
        if voice.path:
            return Path(voice.path)
        if _VOICE_ID.match(voice.voice_id):
            candidate = self.settings.voices_dir / voice.voice_id
            if candidate.is_dir():
                return candidate
        return None

    def forget_voice(self, voice_id: str) -> None:
        """Drop a voice's conditioning from the device (it was edited or removed)."""
        self.voices.forget(voice_id)

    def conditioning(self, voice: VoiceSpec) -> Any:
        """The voice's conditionals on the device (cached); the checkpoint's own voice when it is not cloned."""
        voice_dir = self.voice_dir(voice)
        if voice_dir is None:
            return self.builtin
        return self.voices.get(voice_dir, voice.meta)

    @property
    def stream_bytes(self) -> int:
        """Device memory one open stream may hold besides what the engine holds for all: T3's own state copy
        (``StaticT3.stream_bytes``) and S3Gen's carried state (its piece's noise for the longest voice prompt and
        token cap, and the vocoder's excitation over the largest span). The bound on open streams divides free
        device memory by this (docs/gpu.md, "Several streams on one worker")."""
        from .turbo_stream import FRAMES_PER_TOKEN, LOOKAHEAD_TOKENS, SAMPLES_PER_FRAME

        noise = 80 * FRAMES_PER_TOKEN * (PROMPT_MAX_TOKENS + self.settings.turbo.max_tokens + LOOKAHEAD_TOKENS)
        excitation = max(self.vocoder.buckets) * SAMPLES_PER_FRAME
        return self.t3.stream_bytes + 4 * (noise + excitation)  # float32

    # ----- synthesis -------------------------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Capture the CUDA graphs (T3's attention buckets, S3Gen's flow and vocoder buckets, all into one memory
        pool, largest first), then run a short piece end to end (kernels, allocator, tokenizer, S3Gen); the worker
        says READY only after this."""
        started = time.monotonic()
        pool = None
        if self.device == "cuda" and self.settings.turbo.cuda_graphs:
            import torch

            pool = torch.cuda.graph_pool_handle()
        try:
            graphs = self.t3.capture(pool)
        except RuntimeError as err:  # a driver or build that cannot capture: serve eagerly rather than not at all
            logger.warning("turbo: CUDA graph capture failed (%s); T3 runs eagerly", err)
            self.t3.use_graphs = False
            self.t3.graphs.clear()
            graphs = 0
        flow_graphs = self._capture_s3gen(pool) if pool is not None else 0
        samples = 0
        for chunk in self.synthesize("Warming up.", VoiceSpec("warmup"), {}, lambda: False, seed=0, max_tokens=40):
            samples += len(chunk.pcm)
        logger.info(
            "turbo warm-up: %d T3 CUDA graphs, %d flow and vocoder CUDA graphs, %d samples in %.2fs",
            graphs,
            flow_graphs,
            samples,
            time.monotonic() - started,
        )

    def _capture_s3gen(self, pool: Any) -> int:
        """Capture the flow's and the vocoder's buckets as CUDA graphs, reporting the time and device memory each
        took; either serves eagerly if its capture fails."""
        import torch

        captured = 0
        for name in ("flow", "vocoder"):
            before = torch.cuda.memory_allocated()
            try:
                if name == "flow":
                    spent = self.flow.capture(pool)
                else:
                    spent = self.vocoder.capture(pool)
            except Exception as err:  # a driver or an operation that cannot: serve eagerly rather than not at all
                logger.warning("turbo: capturing S3Gen's %s failed (%s); it runs eagerly", name, err)
                runner = self.flow if name == "flow" else self.vocoder
                runner.graphs.clear()
                continue
            logger.info(
                "turbo %s CUDA graphs captured: %s; device memory +%.0f MiB",
                name,
                ", ".join(f"{bucket}: {seconds:.2f}s" for bucket, seconds in spent.items()),
                (torch.cuda.memory_allocated() - before) / 2**20,
            )
            captured += len(spent)
        return captured

    def synthesize(
        self,
        text: str,
        voice: VoiceSpec,
        settings: Mapping[str, Any],
        should_stop: Callable[[], bool],
        seed: int | None = None,
        max_tokens: int | None = None,
        timing: bool = True,  # noqa: ARG002  # its timing comes with the tokens: always given
    ) -> Generator[EngineChunk, None, None]:
        """Yield audio piece by piece, several chunks per piece as speech tokens arrive.

        The generator is a resumable stream: several may be open at once and advanced in turn, one ``next()`` at a
        time from the engine thread, and each gives the chunks it would give alone. What a stream carries is its
        own: T3's cache and position (:class:`.turbo_static.T3Stream`, copied on and off the shared static buffers
        when another stream ran in between), S3Gen's carried state (:class:`.turbo_stream.PieceDecoder`), the
        voice's conditioning, and its random number state (:class:`StreamRng`, put in place for each ``next()``).
        """
        rng = StreamRng(self.device == "cuda")
        chunks = self._chunks(text, voice, settings, should_stop, seed, max_tokens)
        try:
            while True:
                with rng.active():
                    chunk = next(chunks, None)
                if chunk is None:
                    return
                yield chunk
        finally:
            chunks.close()

    def _chunks(
        self,
        text: str,
        voice: VoiceSpec,
        settings: Mapping[str, Any],
        should_stop: Callable[[], bool],
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> Generator[EngineChunk, None, None]:
        """:meth:`synthesize`'s chunks, drawing from the global RNG (the caller keeps it per stream)."""
        import torch
        from chatterbox.tts_turbo import punc_norm

        from .turbo_stream import LOOKAHEAD_TOKENS, SPEECH_VOCAB, PieceDecoder, Sampling, fresh_t3_cond

        settings = job_settings(voice, settings)
        conds = self.conditioning(voice)
        stability = clamp_setting(settings.get("stability"), 0.0, 1.0, 0.5)
        sampling = Sampling(temperature=1.2 - 0.8 * stability)
        speed = clamp_setting(settings.get("speed"), 0.7, 1.2, 1.0)
        cap = max_tokens or self.settings.turbo.max_tokens
        schedule = self.schedule
        # After the conditioning, as before streams interleaved: a seed gives the same audio whether the voice was
        # built, loaded or cached. Unseeded streams get a seed of their own, so two never draw the same numbers.
        torch.manual_seed(seed % (2**63) if seed is not None else secrets.randbits(63))
        for index, piece in enumerate(text_pieces(text)):
            if should_stop():
                return
            ids = text_token_ids(self.model.tokenizer, punc_norm(piece))
            # S3Gen's flow stays float32 (no flow_dtype): on an H100 autocast made it slower (its kernels are small,
            # so the casts cost more than the narrower math saves: docs/gpu-figures.md), and its mel moved by 0.8 %.
            decoder = PieceDecoder(
                self.model.s3gen,
                conds.gen,
                cap,
                speed,
                flow=self.flow,
                voice=self.flow.voice(conds),
                vocoder=self.vocoder,
            )
            chunk_no = 0  # chunks of this piece sent so far: the first carries the piece's text
            # Tokens come back from the GPU once per chunk: the first chunk's worth plus the flow's lookahead, then
            # a chunk's worth at a time.
            tokens = self.t3.generate(
                fresh_t3_cond(conds.t3),
                ids.to(self.device),
                sampling,
                cap,
                should_stop,
                blocks=(schedule[0] + LOOKAHEAD_TOKENS, *schedule[1:]),
            )
            timer = _Timer()
            for token in timer.iterate(tokens):
                if token >= SPEECH_VOCAB:
                    continue
                decoder.tokens.append(token)
                if decoder.ready(schedule[min(chunk_no, len(schedule) - 1)]):
                    with timer.decoding():
                        pcm = decoder.flush(final=False)
                    yield self._chunk(pcm, piece if chunk_no == 0 else "", index, False, timer.take())
                    chunk_no += 1
            if should_stop():
                return
            with timer.decoding():
                pcm = decoder.flush(final=True)
            end = self._chunk(pcm, piece if chunk_no == 0 else "", index, True, timer.take())
            end.extra["tokens"] = len(decoder.tokens)
            yield end

    def _chunk(self, pcm: np.ndarray, text: str, index: int, last: bool, timing: dict[str, float]) -> EngineChunk:
        """Wrap a piece of audio; chunks carry their piece's text on the first one only.

        ``extra`` also says where the chunk's time went: ``t3_s`` (speech tokens, ``t3_tokens`` of them, since the
        previous chunk), ``decode_s`` (S3Gen flow and vocoder) and ``watermark_s``.
        """
        started = time.perf_counter()
        if self.watermarker is not None and len(pcm):
            pcm = np.asarray(self.watermarker.apply_watermark(pcm, sample_rate=self.sample_rate), dtype=np.float32)
        timing["watermark_s"] = time.perf_counter() - started
        return EngineChunk(pcm=pcm, text=text, extra={"piece": index, "piece_end": last, **timing})


class StreamRng:
    """One stream's random number state. The sampler, the flow's noise and the vocoder's sine source draw from the
    process's global generators (the CPU's, and the GPU's on CUDA: captured graphs replay from its current seed and
    offset); :meth:`active` puts this stream's state there for one step and puts the previous state back after.
    Reading and setting them is a small host copy, with no device sync."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.state = self._get()

    def _get(self) -> tuple[Any, Any]:
        import torch

        return torch.get_rng_state(), torch.cuda.get_rng_state() if self.cuda else None

    def _set(self, state: tuple[Any, Any]) -> None:
        import torch

        torch.set_rng_state(state[0])
        if self.cuda:
            torch.cuda.set_rng_state(state[1])

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        outer = self._get()
        self._set(self.state)
        try:
            yield
        finally:
            self.state = self._get()
            self._set(outer)


class _Timer:
    """Wall time spent getting speech tokens and decoding them, per chunk.

    Both are measured across a host sync (the token block read, the audio copy to the host), so on a GPU they are
    device time too, without adding a sync of their own.
    """

    def __init__(self) -> None:
        self.t3_s = 0.0
        self.t3_tokens = 0
        self.decode_s = 0.0

    def iterate(self, tokens: Iterator[int]) -> Iterator[int]:
        while True:
            started = time.perf_counter()
            token = next(tokens, None)
            self.t3_s += time.perf_counter() - started
            if token is None:
                return
            self.t3_tokens += 1
            yield token

    @contextlib.contextmanager
    def decoding(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.decode_s += time.perf_counter() - started

    def take(self) -> dict[str, float]:
        taken = {"t3_s": self.t3_s, "t3_tokens": float(self.t3_tokens), "decode_s": self.decode_s}
        self.t3_s, self.t3_tokens, self.decode_s = 0.0, 0, 0.0
        return taken


def load(settings: Settings) -> TurboEngine:
    """The engine of this profile (``zsynth.core.engines.TURBO``)."""
    return TurboEngine(settings)
