"""One profile per engine: everything the front, the text stage and the workers decide by engine, in one place.

Adding an engine takes two files: its module under ``workers/engines/`` (with a ``load(settings)`` function) and its
:class:`EngineProfile` here, in :data:`PROFILES`. Every engine-dependent choice reads the profile (the model card of
``/v1/models``, the word bound, normalization, phoneme dictionaries, the memory ceiling, workers and threads per box,
the built-in voices, the output rate, the loader); nothing else compares an engine's name
(``tests/test_engines.py`` checks both, and that each loader exists).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Literal

GIB: Final = 1024**3
# The longest sentence the engines speak in one go (Piper's sentences, Turbo's pieces): longer ones are cut at clauses
# (core/text/sentences.py). Turbo reads text tokens and is bounded by its token cap, so this is its word bound too.
SENTENCE_MAX_CHARS: Final = 300


@dataclass(frozen=True, slots=True)
class BuiltinVoice:
    """A voice that ships with an engine."""

    voice_id: str
    name: str
    description: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelCard:
    """What ``/v1/models`` says of the engine (ElevenLabs' ``ModelResponseModel`` fields that differ by engine)."""

    model_id: str
    name: str
    description: str
    concurrency_group: str
    languages: tuple[tuple[str, str], ...] = (("en", "English"),)  # (language_id, name): what the engine speaks
    # Who made the engine's built-in voices (name, url), as Home Assistant's Wyoming client shows it.
    attribution: tuple[str, str] = ("zsynth", "")


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """Everything decided by engine. Frozen: one instance per engine, in :data:`PROFILES`."""

    name: str
    model: ModelCard
    # Longest run without white space the engine is given (ZSYNTH_MAX_WORD_CHARS overrides it).
    word_chars: int
    # Whether ``apply_text_normalization: auto`` reads numbers and symbols out for it (an engine that reads them
    # itself, as Piper's phonemizer does, says False).
    needs_normalization: bool
    # Whether pronunciation dictionaries' phoneme rules are spoken (else only alias rules apply).
    phoneme_dictionaries: bool
    # The worker's RSS ceiling when ZSYNTH_WORKER_MAX_RSS is 0 (workers/memory.py).
    memory_ceiling: int
    # Workers `zsynth dev` starts on a box ("per_core": one per usable core; "one": one, a GPU's), and the threads one
    # job uses ("up_to_two": min(2, cores); "one").
    workers_per_box: Literal["per_core", "one"]
    threads_per_job: Literal["up_to_two", "one"]
    builtin_voices: tuple[BuiltinVoice, ...]
    # The engine's output rate (Hz) before any encoder resamples it.
    sample_rate: int
    # Whether the engine may run on CUDA (ZSYNTH_TURBO_DEVICE): its worker then exports GPU figures (metrics.py).
    runs_on_gpu: bool
    # Whether a job's first sentence may be spoken in two calls, the first one short (ZSYNTH_FIRST_PIECE,
    # docs/scaling.md): for an engine that speaks a sentence in one call (Piper); Turbo already streams within one.
    cuts_first_piece: bool
    # Where the worker finds the engine: "module:function", called with the settings (workers/engines/__init__.py).
    loader: str
    # The grain at which the worker's one slot is shared between its streams (docs/scheduling.md): one step of a stream
    # is one chunk of the engine's generator, "chunk" for an engine that streams within a sentence (Turbo, the
    # simulated engine: a fraction of a second of audio), "sentence" for one whose call speaks a whole sentence and
    # cannot be resumed midway (Piper).
    grain: Literal["chunk", "sentence"]
    # The most streams one worker holds open at once (ZSYNTH_MAX_STREAMS overrides it), sized by what an open stream
    # keeps in memory (docs/limits.md "Streams per worker").
    max_streams: int

    @property
    def languages(self) -> tuple[str, ...]:
        """The language codes the engine speaks (``language_code`` must be one of them, or empty)."""
        return tuple(code for code, _ in self.model.languages)


_DEFAULT_VOICE: Final = BuiltinVoice(
    "default", "Default", "The engine's default voice.", {"accent": "american", "language": "en", "use_case": "general"}
)

PIPER: Final = EngineProfile(
    name="piper",
    model=ModelCard(
        "zsynth_piper",
        "zsynth Piper (CPU)",
        "Embedded CPU engine: Piper VITS, US English.",
        "standard",
        attribution=("Piper (en_US joe)", "https://github.com/rhasspy/piper"),
    ),
    # One word of "1st2nd3rd4th..." spoken alone on a 2-core box (scripts/bench_text_stage.py): 100 characters about
    # 1 s and +90 MB, 200 about 3 s and +270 MB, 400 9 s and +600 MB; 2,000 took 20 s and +2.8 GB. An ordinary
    # 300-character sentence costs some +240 MB, so a 100-character word costs no more than ordinary text.
    word_chars=100,
    needs_normalization=False,
    phoneme_dictionaries=True,
    # About 0.3 GB idle and at most a few hundred MB more while it speaks (its calls are bounded).
    memory_ceiling=2 * GIB,
    workers_per_box="per_core",
    threads_per_job="up_to_two",
    builtin_voices=(
        BuiltinVoice(
            "joe",
            "Joe",
            "US English male voice of the embedded CPU engine (Piper en_US joe).",
            {"accent": "american", "gender": "male", "age": "middle_aged", "language": "en", "use_case": "general"},
        ),
    ),
    sample_rate=22050,
    runs_on_gpu=False,
    cuts_first_piece=True,
    loader="workers.engines.piper:load",
    grain="sentence",
    # An open stream keeps its sentence iterator and at most one sentence of audio (a few hundred KB) besides the
    # call in progress; the bound is on how many slow clients one CPU worker keeps parked, not on memory.
    max_streams=16,
)

TURBO: Final = EngineProfile(
    name="turbo",
    model=ModelCard(
        "zsynth_turbo",
        "zsynth Chatterbox-Turbo",
        "Chatterbox-Turbo on CUDA with zero-shot cloning.",
        "turbo",
        attribution=("Chatterbox-Turbo", "https://github.com/resemble-ai/chatterbox"),
    ),
    word_chars=SENTENCE_MAX_CHARS,
    needs_normalization=True,
    phoneme_dictionaries=False,
    # torch, the CUDA runtime and a host copy of the weights, several GB, which its calls do not grow.
    memory_ceiling=12 * GIB,
    workers_per_box="one",
    threads_per_job="one",
    builtin_voices=(_DEFAULT_VOICE,),
    sample_rate=24000,
    runs_on_gpu=True,
    cuts_first_piece=False,
    loader="workers.engines.turbo:load",
    grain="chunk",
    # An open stream keeps T3's key/value cache (at most its token cap: about 100 MB in half precision) and S3Gen's
    # carried state: 32 of them take a few GB of an 80 GB card's memory besides the weights and graphs.
    max_streams=32,
)

SIMULATED: Final = EngineProfile(
    name="simulated",
    model=ModelCard("zsynth_simulated", "zsynth simulated", "The simulated engine.", "standard"),
    word_chars=100,
    needs_normalization=False,
    phoneme_dictionaries=False,
    memory_ceiling=1 * GIB,
    workers_per_box="one",
    threads_per_job="one",
    builtin_voices=(_DEFAULT_VOICE,),
    sample_rate=24000,
    runs_on_gpu=False,
    cuts_first_piece=False,
    loader="workers.engines.simulated:load",
    grain="chunk",
    max_streams=64,  # its position in the text: nothing to speak of
)

#: Every engine this build knows, by the name ZSYNTH_ENGINE takes.
PROFILES: Final[Mapping[str, EngineProfile]] = MappingProxyType({p.name: p for p in (PIPER, TURBO, SIMULATED)})


def profile(name: str) -> EngineProfile:
    """The profile of engine ``name``; ValueError naming the known engines for any other."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}: expected one of {', '.join(PROFILES)}") from None
