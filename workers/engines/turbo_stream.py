"""Streaming inside one text piece: speech tokens one by one from T3, audio every few tokens from S3Gen.

This follows the design of chatterbox PR #528 with the installed modules, unmodified:

* speech tokens come from :class:`.turbo_static.StaticT3` (``T3.inference_turbo`` on a static KV cache and CUDA
  graphs, in blocks);
* :class:`PieceDecoder` re-decodes the token prefix with S3Gen's flow on every flush (holding back the frames of
  the 3-token lookahead), with the same noise for the whole piece so earlier frames stay put, then vocodes only the
  new mel frames (plus a few frames of left context, with HiFT's source signal carried over) and crossfades 12 ms
  into the previous chunk. Nothing here touches ``model.conds``: the conditioning comes in as arguments.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Final

import numpy as np
import torch
import torch.nn.functional as F

from .turbo_flow import BucketedFlow, VoiceFlow
from .turbo_vocoder import BucketedVocoder

SAMPLE_RATE: Final = 24000
SAMPLES_PER_FRAME: Final = 480  # S3Gen mels run at 50 Hz, two frames per 25 Hz speech token
FRAMES_PER_TOKEN: Final = 2
LOOKAHEAD_TOKENS: Final = 3  # the flow encoder's pre-lookahead; finalize=False leaves these out
CONTEXT_FRAMES: Final = 6  # mel frames re-vocoded before the new ones so the vocoder has left context
CROSSFADE: Final = SAMPLE_RATE * 12 // 1000
END_FADE: Final = SAMPLE_RATE * 10 // 1000
SPEECH_VOCAB: Final = 6561  # tokens at or above this are T3's start/stop markers, never audio
SILENCE_TOKEN: Final = 4299  # S3GEN_SIL: appended three times to end a piece, as generate() does


@dataclasses.dataclass(frozen=True, slots=True)
class Sampling:
    """T3 sampling parameters (the upstream defaults)."""

    temperature: float = 0.8
    top_k: int = 1000
    top_p: float = 0.95
    repetition_penalty: float = 1.2


def fresh_t3_cond(cond: Any) -> Any:
    """A shallow copy of a T3Cond: generation writes ``cond_prompt_speech_emb`` into the object it is given."""
    return dataclasses.replace(cond)


class PieceDecoder:
    """Turns the growing token list of one text piece into click-free audio chunks."""

    def __init__(
        self,
        s3gen: Any,
        gen_ref: dict[str, Any],
        max_tokens: int,
        speed: float = 1.0,
        flow_dtype: torch.dtype | None = None,
        flow: BucketedFlow | None = None,
        voice: VoiceFlow | None = None,
        vocoder: BucketedVocoder | None = None,
    ) -> None:
        self.s3gen = s3gen
        # The bucketed flow (turbo_flow) when given with the voice's prepared inputs; else upstream's forward.
        self.flow = flow if voice is not None else None
        self.voice = voice
        self.vocoder = vocoder  # turbo_vocoder's bucketed HiFT, or None for upstream's own inference()
        # bfloat16 runs the flow (token encoder and meanflow decoder) under autocast; the vocoder stays in fp32. The
        # engine leaves it None (slower on an H100); scripts/gpu_run.py sets it to measure how far the mel moves.
        self.flow_dtype = flow_dtype
        self.gen_ref = gen_ref
        self.speed = speed
        self.tokens: list[int] = []
        self.frames_done = 0  # mel frames already vocoded
        self.samples_out = 0
        self._tail: np.ndarray | None = None  # the last CROSSFADE samples, held back for the next chunk
        self._source: torch.Tensor | None = None  # HiFT's excitation for the last vocoded span
        # One noise draw for the whole piece, so every re-decode of the prefix starts from the same point.
        # The bucketed flow starts every frame from it, the prompt's too (its first frames); upstream's forward
        # starts only the speech frames from it and draws the prompt's share anew each call.
        prompt = voice.prompt_len if voice is not None else 0
        n_frames = FRAMES_PER_TOKEN * (prompt + max_tokens + LOOKAHEAD_TOKENS)
        self._noise = torch.randn(1, 80, n_frames, dtype=s3gen.dtype, device=s3gen.device)

    def ready(self, min_new_tokens: int) -> bool:
        """True when enough tokens past the lookahead arrived to make a chunk worth sending."""
        decodable = len(self.tokens) - LOOKAHEAD_TOKENS
        return decodable * FRAMES_PER_TOKEN - self.frames_done >= min_new_tokens * FRAMES_PER_TOKEN

    @torch.inference_mode()
    def flush(self, final: bool) -> np.ndarray:
        """Audio for the tokens so far (all of them and the end of the piece when ``final``)."""
        tokens = self.tokens + ([SILENCE_TOKEN] * LOOKAHEAD_TOKENS if final else [])
        n_frames = FRAMES_PER_TOKEN * (len(tokens) - (0 if final else LOOKAHEAD_TOKENS))
        if n_frames <= self.frames_done:
            return self._finish(np.zeros(0, np.float32), final)
        speech = torch.tensor([tokens], dtype=torch.long, device=self.s3gen.device)
        # finalize=False is broken in 0.1.7 (it trims the encoder output but not its mask), so decode every token
        # and drop the frames of the 3 lookahead tokens instead: the kept frames had their lookahead all the same.
        mels = self.mels(speech)
        context = min(self.frames_done, CONTEXT_FRAMES)
        span = mels[:, :, self.frames_done - context : n_frames].to(dtype=self.s3gen.dtype)
        wav = self._vocode(span, context)
        self.frames_done = n_frames
        return self._finish(wav, final)

    def mels(self, speech: torch.Tensor) -> torch.Tensor:
        """S3Gen's flow on a whole token sequence (1, T) with this piece's noise: mel frames (1, 80, 2T)."""
        if self.flow is not None and self.voice is not None:
            return self.flow.mels(self.voice, speech, self._noise).float()
        from chatterbox.models.s3gen.s3gen import S3Token2Mel

        autocast: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if self.flow_dtype is not None:
            autocast = torch.autocast(self.s3gen.device.type, dtype=self.flow_dtype)
        with autocast:
            mels: torch.Tensor = S3Token2Mel.forward(
                self.s3gen,
                speech,
                ref_wav=None,
                ref_sr=None,
                ref_dict=dict(self.gen_ref),  # a copy: forward() casts the reference tensors in the dict it gets
                n_cfm_timesteps=2,
                finalize=True,
                noised_mels=self._noise[:, :, : FRAMES_PER_TOKEN * speech.shape[1]],
            )
        return mels.float()

    def _vocode(self, span: torch.Tensor, context: int) -> np.ndarray:
        """Vocode a mel span whose first ``context`` frames were vocoded before; drop all but the crossfade."""
        cache = torch.zeros(1, 1, 0, device=span.device, dtype=span.dtype)
        if self.speed != 1.0:
            span = F.interpolate(span, size=max(1, round(span.shape[2] / self.speed)), mode="linear")
            context_samples = round(context * SAMPLES_PER_FRAME / self.speed)
        else:
            context_samples = context * SAMPLES_PER_FRAME
            if self._source is not None and context:
                cache = self._source[:, :, -context_samples:]
        if self.vocoder is not None:
            wav, source = self.vocoder.inference(span, cache)
        else:
            wav, source = self.s3gen.mel2wav.inference(speech_feat=span, cache_source=cache)
        self._source = source
        audio = wav.squeeze(0).float().cpu().numpy()
        if self.samples_out == 0 and self._tail is None:
            fade = self.s3gen.trim_fade.float().cpu().numpy()  # upstream's fade-in against reference spill-over
            n = min(len(fade), len(audio))
            audio[:n] *= fade[:n]
            return np.asarray(audio, dtype=np.float32)
        keep_from = max(0, context_samples - (0 if self._tail is None else len(self._tail)))
        return np.asarray(audio[keep_from:], dtype=np.float32)

    def _finish(self, audio: np.ndarray, final: bool) -> np.ndarray:
        """Crossfade into the held-back tail, hold back a new one (or fade out at the end of the piece)."""
        if self._tail is not None and len(audio) >= len(self._tail):
            n = len(self._tail)
            ramp = np.linspace(0.0, 1.0, n, dtype=np.float32)
            audio = audio.copy()
            audio[:n] = self._tail * (1.0 - ramp) + audio[:n] * ramp
            self._tail = None
        elif self._tail is not None:
            audio = np.concatenate([self._tail, audio])
            self._tail = None
        if final:
            n = min(END_FADE, len(audio))
            if n:
                audio[-n:] *= np.linspace(1.0, 0.0, n, dtype=np.float32)
        elif len(audio) > CROSSFADE:
            self._tail = audio[-CROSSFADE:].copy()
            audio = audio[:-CROSSFADE]
        self.samples_out += len(audio)
        return np.ascontiguousarray(audio, dtype=np.float32)
