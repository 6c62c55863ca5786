"""One synthesis service behind every transport: a request becomes a job, the job is queued, failures are classified.

The HTTP routes (whole, stream, with-timestamps, OpenAI's speech route), both realtime sockets and the avatar build
their job with :meth:`SynthesisService.build` and queue it with :meth:`SynthesisService.submit`. What goes wrong on
the way or while the job runs is classified once by :func:`classify` into a :class:`Failure`; each transport only
renders it in its envelope:

==============================  ==========================================  =================================
kind                            HTTP (status, code, Retry-After)            socket ``error`` / avatar ``code``
==============================  ==========================================  =================================
busy                            429 ``system_busy``, 1 s                    ``system_busy``
unavailable                     503 ``system_busy``, 1 s                    ``synthesis_unavailable``
voice_not_found                 404 ``voice_not_found``                     ``voice_not_found``
voice_storage_unavailable       503 ``voice_storage_unavailable``, 5 s      ``voice_storage_unavailable``
dictionary_storage_unavailable  503 ``dictionary_storage_unavailable``, 1s  ``synthesis_unavailable``
invalid                         the option's status and code, with param    the option's code
                                (400 ``input_too_complex``, param text:
                                the job passed its worker's memory ceiling)
internal                        500, the job's own code                     the job's own code
==============================  ==========================================  =================================

``unavailable`` covers every failure that means "try again later" rather than "this request is wrong": a missed
deadline, a worker that died, restarted or is stopping, lost events, a job queued past its deadline, a front shutting
down and a Redis that does not answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from aiohttp import web

from .auth import Credential
from .config import Settings
from .dictionaries.store import DICTIONARIES, DictionaryStore, StorageUnavailable
from .dispatch import DISPATCHER, Dispatcher, JobFailed, JobStream
from .keys import SETTINGS
from .protocol import ErrorCode, Job, Priority
from .spoken import Spoken
from .textprep import TextOptionError, TextOptions, prepare
from .voices.catalog import VOICES, VoiceCatalog

FailureKind = Literal[
    "busy",
    "unavailable",
    "voice_not_found",
    "voice_storage_unavailable",
    "dictionary_storage_unavailable",
    "invalid",
    "internal",
]

# Job failure codes that mean "try again later" rather than "this request is wrong".
TRANSIENT_CODES: Final = frozenset(
    {
        ErrorCode.TIMEOUT,
        ErrorCode.WORKER_RESTARTED,
        ErrorCode.WORKER_STOPPING,
        ErrorCode.WORKER_DIED,
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.LOST_EVENTS,
        ErrorCode.DEADLINE_EXCEEDED,
        ErrorCode.REDIS_UNAVAILABLE,
    }
)
UNAVAILABLE_CODE: Final = "synthesis_unavailable"  # the realtime transports' code for the unavailable kinds


@dataclass(frozen=True, slots=True)
class Failure:
    """A classified synthesis failure: what it is, and what each transport shows for it."""

    kind: FailureKind
    http_status: int
    code: str  # the HTTP routes' code (ElevenLabs ``detail.status``/``code``, OpenAI ``error.code``)
    realtime_code: str  # a socket error frame's ``error``, an avatar ``error`` event's ``code``
    message: str
    retry_after: int | None = None  # seconds, sent as Retry-After over HTTP
    param: str | None = None  # the request field at fault, for the invalid kind

    @property
    def headers(self) -> dict[str, str]:
        """The HTTP headers that go with it."""
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


class SynthesisFailed(Exception):
    """A job could not be built or queued; carries its classified failure."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def classify(err: JobFailed | TextOptionError | StorageUnavailable) -> Failure:
    """The one mapping from what went wrong to what every transport shows.

    Bad voice settings never get here: each transport's request model refuses them before a job is built.
    """
    if isinstance(err, TextOptionError):
        return Failure("invalid", err.status, err.code, err.code, err.message, param=err.param)
    if isinstance(err, StorageUnavailable):
        message = f"Pronunciation dictionaries cannot be read ({err})."
        return Failure(
            "dictionary_storage_unavailable", 503, "dictionary_storage_unavailable", UNAVAILABLE_CODE, message, 1
        )
    code, message = err.code, err.message
    if code == ErrorCode.QUEUE_FULL:
        return Failure("busy", 429, "system_busy", "system_busy", message, 1)
    if code in TRANSIENT_CODES:
        return unreachable(message)
    if code == ErrorCode.INPUT_TOO_COMPLEX:  # the job took its worker past its memory ceiling: retrying fails again
        return Failure("invalid", 400, code, code, message, param="text")
    if code == ErrorCode.VOICE_NOT_FOUND:  # the worker could not load the voice (it never speaks another one)
        return Failure("voice_not_found", 404, code, code, message)
    if code == ErrorCode.VOICE_STORAGE_UNAVAILABLE:
        return Failure("voice_storage_unavailable", 503, code, code, message, 5)
    # synthesis_failed, invalid_output_format, error, cancelled (its client has gone: only the metrics see it), and a
    # code this front does not know (from a newer worker): the service's own fault.
    return Failure("internal", 500, code, code, message)


def unreachable(message: str = "The speech service is unavailable.") -> Failure:
    """The "try again later" failure: a transient job failure, or a queue that could not be reached (Redis down)."""
    return Failure("unavailable", 503, "system_busy", UNAVAILABLE_CODE, message, 1)


def queue_owner(credential: Credential | None) -> str | None:
    """Whose share of the queue a job counts against: the credential's owner, a token's minting key (none for an
    open server), so the tokens of one key share that key's share."""
    return credential.owner if credential is not None and credential.kind != "open" else None


@dataclass(frozen=True, slots=True)
class SynthesisRequest:
    """A validated synthesis request, whatever transport it came by.

    ``options`` None means the text is spoken as written (the avatar's ``speak`` takes no text options); otherwise
    break tags, pronunciation dictionaries and normalization apply (:mod:`zsynth.textprep`). Either way its words are
    bounded for the engine.
    """

    text: str
    voice_id: str  # as asked: an unknown id is spoken by the swap-out voice where there is a voice catalog
    output_format: str
    request_id: str
    voice_settings: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None
    options: TextOptions | None = field(default_factory=TextOptions)
    alignment: bool = False
    priority: Priority = "batch"


@dataclass(frozen=True, slots=True)
class Prepared:
    """A job ready to queue and what its text became (``spoken.changed`` is false when it is spoken as written)."""

    job: Job
    spoken: Spoken


class SynthesisService:
    """Builds jobs from synthesis requests and queues them through the dispatcher."""

    def __init__(
        self,
        settings: Settings,
        dispatcher: Dispatcher,
        *,
        dictionaries: DictionaryStore | None = None,
        voices: VoiceCatalog | None = None,
    ) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self.dictionaries = dictionaries
        self.voices = voices

    @classmethod
    def of(cls, app: web.Application) -> SynthesisService:
        """The service over an application's dispatcher, dictionaries and voice catalog (those it has)."""
        return cls(app[SETTINGS], app[DISPATCHER], dictionaries=app.get(DICTIONARIES), voices=app.get(VOICES))

    async def build(self, request: SynthesisRequest) -> Prepared:
        """The job for ``request``: its text prepared, its voice resolved; SynthesisFailed when that fails.

        Every transport builds its jobs here, so every job's text has been through the one text stage
        (:func:`zsynth.textprep.prepare`): options applied, words bounded for the engine.
        """
        engine, bound = self.settings.engine, self.settings.max_word_chars
        try:
            spoken = await prepare(request.text, request.options, engine, self.dictionaries, max_word_chars=bound)
        except (TextOptionError, StorageUnavailable) as err:
            raise SynthesisFailed(classify(err)) from err
        text = spoken.text if spoken.changed else request.text
        voice_id = self.voices.resolve(request.voice_id) if self.voices is not None else request.voice_id
        job = Job(
            text=text,
            voice_id=voice_id,
            output_format=request.output_format,
            voice_settings=dict(request.voice_settings),
            priority=request.priority,
            request_id=request.request_id,
            alignment=request.alignment,
            seed=request.seed,  # the dispatcher sets the start deadline
        )
        return Prepared(job, spoken)

    async def wait_for_share(self, owner: str | None, wait_s: float) -> None:
        """Return once ``owner`` may queue a job (at once without one); SynthesisFailed (busy) after ``wait_s``."""
        if owner is None:
            return
        try:
            await self.dispatcher.wait_for_share(owner, wait_s)
        except JobFailed as err:
            raise SynthesisFailed(classify(err)) from err

    async def submit(self, job: Job, *, owner: str | None = None) -> JobStream:
        """Queue ``job`` (counted against ``owner``'s share of the queue); SynthesisFailed when it cannot be."""
        try:
            return await self.dispatcher.submit(job, owner=owner)
        except JobFailed as err:
            raise SynthesisFailed(classify(err)) from err
