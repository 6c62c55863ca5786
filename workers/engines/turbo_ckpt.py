"""Checkpoint facts for Chatterbox-Turbo: the file set, the backbone size, and random-weight checkpoints.

The real weights are not on any package registry, so tests and benchmarks build a checkpoint directory with the real
file names and the real module classes, filled with random weights: ``tiny`` shrinks the GPT-2 backbone of T3 (two
layers), ``full`` keeps every module at its real size. The engine reads the backbone size from the T3 tensor shapes
(:func:`backbone_config`), so such a checkpoint loads through the unchanged ``from_local`` path.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import numpy as np

WEIGHT_FILES: Final = ("ve.safetensors", "t3_turbo_v1.safetensors", "s3gen_meanflow.safetensors")
# AutoTokenizer needs its config plus either the slow GPT-2 pair (the published checkpoint) or a tokenizer.json.
TOKENIZER_CONFIG: Final = "tokenizer_config.json"
TOKENIZER_FILE_SETS: Final = (("vocab.json", "merges.txt"), ("tokenizer.json",))
BUILTIN_CONDS: Final = "conds.pt"
STOCK_BACKBONE: Final = "GPT2_medium"
HEAD_DIM: Final = 64  # every GPT-2 size uses 64-wide attention heads
# The paralinguistic tags of the published tokenizer that the official demo offers.
EVENT_TAGS: Final = (
    "[clear throat]", "[sigh]", "[shush]", "[cough]", "[groan]", "[sniff]", "[gasp]", "[chuckle]", "[laugh]",
)  # fmt: skip


def missing_files(ckpt: Path) -> list[str]:
    """Names a loadable checkpoint directory lacks (empty when the file set is complete)."""
    missing = [name for name in WEIGHT_FILES if not (ckpt / name).is_file()]
    if not (ckpt / TOKENIZER_CONFIG).is_file():
        missing.append(TOKENIZER_CONFIG)
    if not any(all((ckpt / name).is_file() for name in names) for names in TOKENIZER_FILE_SETS):
        missing.append("vocab.json + merges.txt (or tokenizer.json)")
    return missing


def backbone_config(t3_file: Path) -> dict[str, Any] | None:
    """The GPT-2 config the T3 weights were made for, or None when it is the stock GPT-2 medium."""
    from chatterbox.models.t3.llama_configs import GPT2_MEDIUM_CONFIG
    from safetensors import safe_open

    with safe_open(str(t3_file), framework="pt") as handle:
        keys = list(handle.keys())
        metadata = handle.metadata() or {}
        n_positions, n_embd = handle.get_slice("tfmr.wpe.weight").get_shape()
    n_layer = len({key.split(".")[2] for key in keys if key.startswith("tfmr.h.")})
    n_head = int(metadata.get("n_head", n_embd // HEAD_DIM))
    stock: dict[str, Any] = GPT2_MEDIUM_CONFIG
    if [n_layer, n_embd, n_head, n_positions] == [stock[k] for k in ("n_layer", "n_embd", "n_head", "n_positions")]:
        return None
    config: dict[str, Any] = copy.deepcopy(stock)
    config.update(n_layer=n_layer, n_embd=n_embd, hidden_size=n_embd, n_head=n_head, n_positions=n_positions,
                  n_ctx=n_positions)  # fmt: skip
    return config


@contextmanager
def backbone(config: dict[str, Any] | None) -> Iterator[None]:
    """Make T3 build the given backbone while the block runs (T3 and T3Config read this one shared dict)."""
    from chatterbox.models.t3 import llama_configs

    if config is None:
        yield
        return
    saved = llama_configs.LLAMA_CONFIGS[STOCK_BACKBONE]
    llama_configs.LLAMA_CONFIGS[STOCK_BACKBONE] = config
    try:
        yield
    finally:
        llama_configs.LLAMA_CONFIGS[STOCK_BACKBONE] = saved


def turbo_t3_config() -> Any:
    """The T3 hyperparameters ``from_local`` hard-codes for Turbo."""
    from chatterbox.models.t3.modules.t3_config import T3Config

    hp = T3Config(text_tokens_dict_size=50276)
    hp.llama_config_name = STOCK_BACKBONE
    hp.speech_tokens_dict_size = 6563
    hp.input_pos_emb = None
    hp.speech_cond_prompt_len = 375
    hp.use_perceiver_resampler = False
    hp.emotion_adv = False
    return hp


def tiny_backbone() -> dict[str, Any]:
    """A two-layer, 128-wide GPT-2 (two 64-wide heads): enough to run the real code path on a CPU."""
    from chatterbox.models.t3.llama_configs import GPT2_MEDIUM_CONFIG

    config: dict[str, Any] = copy.deepcopy(GPT2_MEDIUM_CONFIG)
    config.update(n_layer=2, n_head=2, n_embd=128, hidden_size=128, n_positions=2048, n_ctx=2048)
    return config


def _write_tokenizer(dest: Path) -> None:
    """A small byte-level BPE saved as the GPT-2 file set (vocab.json, merges.txt) plus the event tags."""
    from tokenizers import ByteLevelBPETokenizer, Tokenizer
    from transformers import PreTrainedTokenizerFast

    corpus = [
        "The quick brown fox jumps over the lazy dog. Hello there, how are you today?",
        "Speech synthesis turns written text into natural sounding audio, one sentence at a time.",
        "Numbers like 1, 2, 3 and words with punctuation: commas, dashes - and quotes \"yes\" or 'no'!",
    ] * 20
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=600, min_frequency=1, special_tokens=["<|endoftext|>"])
    bpe.save_model(str(dest))  # vocab.json and merges.txt, the names of the published checkpoint
    tok = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers leaves it unannotated
        tokenizer_object=Tokenizer.from_str(bpe._tokenizer.to_str()),
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    tok.add_tokens(list(EVENT_TAGS))
    tok.save_pretrained(str(dest))


def reference_clip(seconds: float, sample_rate: int = 24000, pitch_hz: float = 140.0, seed: int = 0) -> np.ndarray:
    """A voice-like synthetic clip: a gliding harmonic tone with syllable-rate amplitude and a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    f0 = pitch_hz * (1.0 + 0.08 * np.sin(2 * math.pi * 0.7 * t))
    phase = 2 * math.pi * np.cumsum(f0) / sample_rate
    tone = sum(np.sin(k * phase) / k for k in range(1, 6))
    envelope = 0.5 + 0.5 * np.sin(2 * math.pi * 4.0 * t) ** 2
    clip = 0.2 * tone * envelope + 0.01 * rng.standard_normal(t.size)
    return np.asarray(clip, dtype=np.float32)


def write_random_checkpoint(dest: Path, size: str = "tiny", seed: int = 0) -> Path:
    """Write a Turbo checkpoint with random weights (``tiny`` or ``full`` T3) and a built-in voice into ``dest``."""
    import soundfile as sf
    import torch
    from chatterbox.models.s3gen import S3Gen
    from chatterbox.models.t3 import T3
    from chatterbox.models.voice_encoder import VoiceEncoder
    from safetensors.torch import save_file

    from .turbo_compat import apply_workarounds

    apply_workarounds()
    from chatterbox.tts_turbo import ChatterboxTurboTTS

    if size not in ("tiny", "full"):
        raise ValueError(f"checkpoint size {size!r}: expected tiny or full")
    dest.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = tiny_backbone() if size == "tiny" else None

    def dump(module: torch.nn.Module, name: str, metadata: dict[str, str] | None = None) -> None:
        tensors = {key: value.contiguous() for key, value in module.state_dict().items()}
        save_file(tensors, str(dest / name), metadata=metadata)

    with backbone(config):
        t3 = T3(turbo_t3_config())
    dump(t3, "t3_turbo_v1.safetensors", {"n_head": str(t3.cfg.n_head), "zsynth_random": size})
    ve = VoiceEncoder()
    dump(ve, "ve.safetensors")
    s3gen = S3Gen(meanflow=True)
    dump(s3gen, "s3gen_meanflow.safetensors")
    _write_tokenizer(dest)
    (dest / "zsynth-random-weights.json").write_text(json.dumps({"size": size, "seed": seed}) + "\n")

    # The built-in voice goes through the real conditioning code, as the published conds.pt did.
    from transformers import AutoTokenizer

    del t3.tfmr.wte
    model = ChatterboxTurboTTS(t3.eval(), s3gen.eval(), ve.eval(), AutoTokenizer.from_pretrained(dest), "cpu")
    clip_path = dest / "builtin-reference.wav"
    sf.write(str(clip_path), reference_clip(7.0, seed=seed), 24000)
    with torch.inference_mode():
        model.prepare_conditionals(str(clip_path), norm_loudness=True)
    model.conds.save(dest / BUILTIN_CONDS)
    clip_path.unlink()
    return dest


def is_random(ckpt: Path) -> str | None:
    """``tiny``/``full`` for a random-weight checkpoint made here, None for real weights."""
    marker = ckpt / "zsynth-random-weights.json"
    if not marker.is_file():
        return None
    return str(json.loads(marker.read_text()).get("size", "unknown"))
