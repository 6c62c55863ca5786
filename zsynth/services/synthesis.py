"""One synthesis service behind every transport: it owns a job's whole life, from the request to its last event.

The HTTP routes (whole, stream, with-timestamps, OpenAI's speech route), both realtime sockets and the avatar each
parse their wire format into a :class:`SynthesisRequest` and hand it to :meth:`SynthesisService.speak`. In this
order it resolves the voice (a cloned voice this box lacks is fetched from the voice library first: this runs after
the caller was authenticated), prepares the text, waits for the owner's share of the queue (realtime requests only;
batch ones are refused at once), queues the job and returns a :class:`Speech`: the job (its id and voice for the
headers), what the text became, and its chunk events. Leaving the speech (``async with``, or
:meth:`Speech.close`) cancels the job unless it ended; so does cancelling ``speak`` itself while it queues.

Whatever goes wrong on the way or while the job runs is classified once, here, into a :class:`Failure` and raised as
:class:`SynthesisFailed`, the only error that leaves the service; each transport only renders it in its envelope:

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

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal

from aiohttp import web
from redis.exceptions import RedisError

from zsynth.core.codes import ApiCode
from zsynth.core.config import Settings
from zsynth.core.logs import quoted
from zsynth.core.protocol import ErrorCode, Event, Job, Priority
from zsynth.core.text import bounds
from zsynth.core.text.dictionaries.store import DictionaryStore
from zsynth.core.text.dictionaries.store import StorageUnavailable as DictionariesUnavailable
from zsynth.core.text.prepare import TextOptionError, TextOptions, admit, prepare
from zsynth.core.text.spoken import Spoken
from zsynth.core.tracing import Tracing, span
from zsynth.core.voices.library import StorageUnavailable as VoicesUnavailable
from zsynth.core.voices.library import VoiceLibrary, VoiceMissing
from zsynth.services.auth import Credential
from zsynth.services.dispatch import DISPATCHER, Dispatcher, JobFailed, JobStream
from zsynth.services.keys import DICTIONARIES, SETTINGS, TRACING, VOICE_LIBRARY
from zsynth.services.voices import VOICES, VoiceCatalog, require_voice

logger = logging.getLogger(__name__)

FailureKind = Literal[
    "busy",
    "unavailable",
    ApiCode.VOICE_NOT_FOUND,
    ApiCode.VOICE_STORAGE_UNAVAILABLE,
    ApiCode.DICTIONARY_STORAGE_UNAVAILABLE,
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
        ErrorCode.REDIS_FAILOVER,
        ErrorCode.CLIENT_TOO_SLOW,  # its front took no audio for the flow-control wait: the client is likely gone
    }
)
UNAVAILABLE_CODE: Final = ApiCode.SYNTHESIS_UNAVAILABLE  # the realtime transports' code for the unavailable kinds
VOICE_RETRY_AFTER_S: Final = 5  # a voice library bucket that did not answer (the voice routes' own Retry-After)

#: What may go wrong on the way or while a job runs: :func:`classify` turns each into a :class:`Failure`.
Classified = (
    JobFailed | TextOptionError | DictionariesUnavailable | VoicesUnavailable | VoiceMissing | RedisError | OSError
)


@dataclass(frozen=True, slots=True)
class Failure:
    """A classified synthesis failure: what it is, and what each transport shows for it."""

    kind: FailureKind
    http_status: int
    code: str  # the HTTP routes' code (ElevenLabs ``detail.status``/``code``, OpenAI ``error.code``)
    realtime_code: str  # a socket error frame's ``error``, an avatar ``error`` event's ``code``
    message: str
    retry_after: int | None = None  # seconds, sent as Retry-After over HTTP
    param: str | None = None  # the request field at fault, for the invalid and voice_not_found kinds
    reason: str = ""  # what went wrong underneath, for the logs (a job's own error code, say)

    @property
    def headers(self) -> dict[str, str]:
        """The HTTP headers that go with it."""
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


class SynthesisFailed(Exception):
    """A job could not be built, queued or finished; carries its classified failure."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def classify(err: Classified) -> Failure:
    """The one mapping from what went wrong to what every transport shows.

    Bad voice settings never get here: each transport's request model refuses them before a job is built.
    """
    if isinstance(err, TextOptionError):
        return Failure("invalid", err.http_status, err.code, err.code, err.message, param=err.param, reason=err.code)
    if isinstance(err, DictionariesUnavailable):
        # The storage's own words name its endpoint, bucket and object keys: the log gets them, the caller does not.
        logger.warning("pronunciation dictionaries cannot be read: %s", err)
        message = "Pronunciation dictionaries cannot be read right now. Try again shortly."
        return Failure(
            ApiCode.DICTIONARY_STORAGE_UNAVAILABLE,
            503,
            ApiCode.DICTIONARY_STORAGE_UNAVAILABLE,
            UNAVAILABLE_CODE,
            message,
            1,
            reason="dictionary_storage",
        )
    if isinstance(err, VoiceMissing):
        missing = ApiCode.VOICE_NOT_FOUND
        return Failure(ApiCode.VOICE_NOT_FOUND, 404, missing, missing, err.message, param="voice_id", reason="voices")
    if isinstance(err, VoicesUnavailable):
        down = ApiCode.VOICE_STORAGE_UNAVAILABLE
        # The storage's own words are in the voice library's log line, never in the caller's message.
        message = "The voice library's storage cannot be reached; nothing was changed. Try again shortly."
        return Failure(
            ApiCode.VOICE_STORAGE_UNAVAILABLE, 503, down, down, message, VOICE_RETRY_AFTER_S, reason="voices"
        )
    if isinstance(err, RedisError | OSError):  # Redis unreachable or slow, outside the dispatcher's own calls
        return unreachable(reason=ErrorCode.REDIS_UNAVAILABLE)
    code, message = err.code, err.message
    if code == ErrorCode.QUEUE_FULL:
        return Failure("busy", 429, ApiCode.SYSTEM_BUSY, ApiCode.SYSTEM_BUSY, message, 1, reason=code)
    if code in TRANSIENT_CODES:
        return unreachable(message, reason=code)
    if code in (ErrorCode.INPUT_TOO_COMPLEX, ErrorCode.AUDIO_TOO_LONG):  # retrying fails again: the text is at fault
        return Failure("invalid", 400, code, code, message, param="text", reason=code)
    if code == ErrorCode.VOICE_NOT_FOUND:  # the worker could not load the voice (it never speaks another one)
        return Failure(ApiCode.VOICE_NOT_FOUND, 404, code, code, message, reason=code)
    if code == ErrorCode.VOICE_STORAGE_UNAVAILABLE:
        return Failure(ApiCode.VOICE_STORAGE_UNAVAILABLE, 503, code, code, message, VOICE_RETRY_AFTER_S, reason=code)
    # synthesis_failed, invalid_output_format, error, cancelled (its client has gone: only the metrics see it), and a
    # code this front does not know (from a newer worker): the service's own fault.
    return Failure("internal", 500, code, code, message, reason=code)


def unreachable(message: str = "The speech service is unavailable.", *, reason: str = "unavailable") -> Failure:
    """The "try again later" failure: a transient job failure, or a queue that could not be reached (Redis down)."""
    return Failure("unavailable", 503, ApiCode.SYSTEM_BUSY, UNAVAILABLE_CODE, message, 1, reason=reason)


def queue_owner(credential: Credential | None) -> str | None:
    """Whose share of the queue a job counts against: the credential's owner, a token's minting key (none for an
    open server), so the tokens of one key share that key's share."""
    return credential.owner if credential is not None and credential.kind != "open" else None


@dataclass(frozen=True, slots=True)
class SynthesisRequest:
    """A validated synthesis request, whatever transport it came by.

    ``options`` None means the text is spoken as written (the avatar's ``speak`` takes no text options); otherwise
    break tags, pronunciation dictionaries and normalization apply (:mod:`zsynth.core.text.prepare`). Either way its
    words are bounded for the engine. A ``realtime`` request whose owner's share of the queue is taken waits for room
    (up to the first-chunk deadline); a ``batch`` one is refused at once (busy).
    """

    text: str
    voice_id: str  # as asked: an unknown id is spoken by the swap-out voice where there is a voice catalog
    output_format: str
    request_id: str
    # The workspace the caller acts in (zsynth.core.workspaces): whose clones and dictionaries it may name. Required,
    # so that no transport can forget it.
    workspace: str
    voice_settings: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None
    options: TextOptions | None = field(default_factory=TextOptions)
    alignment: bool = False
    priority: Priority = "batch"
    # The job whose audio this one's plays right after, when it is still unfinished (a socket context's previous
    # segment): the worker that holds both computes this one once that one is made, on its playback clock.
    follows: str = ""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A job ready to queue and what its text became (``spoken.changed`` is false when it is spoken as written)."""

    job: Job
    spoken: Spoken


class Speech:
    """One queued job: its record, what its text became, and its audio events; closing it cancels the job.

    Use as an async context manager (``async with await service.speak(...) as speech``), or call :meth:`close`.
    """

    def __init__(self, stream: JobStream, spoken: Spoken) -> None:
        self._stream = stream
        self.spoken = spoken

    @property
    def job(self) -> Job:
        """The job as queued (``job_id`` and the ``voice_id`` actually spoken go in the HTTP headers)."""
        return self._stream.job

    async def chunks(self) -> AsyncIterator[Event]:
        """Yield the job's chunk events until it is done; SynthesisFailed when it fails or misses a deadline."""
        try:
            async for event in self._stream.chunks():
                yield event
        except JobFailed as err:
            raise SynthesisFailed(classify(err)) from err

    async def close(self, reason: str = "client gone") -> None:
        """Stop listening; the job is cancelled on its worker unless it already ended (``reason``: for its log)."""
        await self._stream.close(reason)

    async def __aenter__(self) -> Speech:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class SynthesisService:
    """The one owner of a job's life: voice, text, queue share, queueing, events and failures."""

    def __init__(
        self,
        settings: Settings,
        dispatcher: Dispatcher,
        *,
        dictionaries: DictionaryStore | None = None,
        voices: VoiceCatalog | None = None,
        library: VoiceLibrary | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self.dictionaries = dictionaries
        self.voices = voices
        self.library = library
        self.tracing = tracing  # spans for text preparation and queueing, when traces are on

    @property
    def limits(self) -> bounds.OutputLimits:
        """The output bounds of one request (ZSYNTH_MAX_PAUSE, ZSYNTH_MAX_AUDIO)."""
        return bounds.OutputLimits(self.settings.limits.max_pause_s, self.settings.limits.max_audio_s)

    async def admit(
        self,
        texts: Sequence[str],
        options: TextOptions | None,
        *,
        workspace: str,
        before: bounds.OutputEstimate | None = None,
    ) -> bounds.OutputEstimate:
        """Check the texts of one request that its transport speaks as several jobs (a dialogue's inputs, a socket
        message cut into segments, a Wyoming stream's chunks) against the request's output bounds, together and
        before any of them is queued; ``before`` is what the request already asked for, ``workspace`` the caller's
        (whose dictionaries the options may name). Returns the sum.

        SynthesisFailed (400 ``audio_limit_exceeded`` or ``pause_limit_exceeded``, or what a bad dictionary gets)
        when they do not pass: each job is checked again as it is built (:meth:`build`).
        """
        try:
            engine, store = self.settings.engine, self.dictionaries
            return await admit(texts, options, engine, store, workspace=workspace, limits=self.limits, before=before)
        except (TextOptionError, DictionariesUnavailable) as err:
            raise SynthesisFailed(classify(err)) from err

    @classmethod
    def of(cls, app: web.Application) -> SynthesisService:
        """The application's one service (built by :func:`synthesis_context`)."""
        return app[SYNTHESIS]

    async def speak(self, request: SynthesisRequest, *, owner: str | None = None) -> Speech:
        """Queue ``request``'s job (counted against ``owner``'s share of the queue) and return its speech.

        SynthesisFailed (and nothing else) when the voice, the text, the queue or Redis refuse it. Cancelled while
        it queues, the job is cancelled too: a caller that went away never leaves a job behind.
        """
        try:
            with span(self.tracing, "prepare text"):
                prepared = await self.build(request)
            job = prepared.job
            level = logging.DEBUG if request.priority == "realtime" else logging.INFO
            logger.log(
                level,
                "request %s: job %s voice %s (asked %s) format %s (%d chars)",
                job.request_id,
                job.job_id,
                job.voice_id,
                quoted(request.voice_id),
                job.output_format,
                len(request.text),
                extra={"request_id": job.request_id, "job_id": job.job_id},
            )
            if owner is not None and request.priority == "realtime":
                # Past the owner's share, wait for one of its own jobs to end, so other keys' jobs go first. Nothing
                # may await between this wait and the push, or the share just seen free could be taken again.
                await self.dispatcher.wait_for_share(owner, self.settings.jobs.first_chunk_timeout_s)
            with span(self.tracing, "queued", {"zsynth.job_id": job.job_id, "zsynth.priority": job.priority}):
                job.trace = self.tracing.carrier() if self.tracing is not None else {}  # the worker's parent
                return Speech(await self._queue(job, owner), prepared.spoken)
        except (JobFailed, TextOptionError, DictionariesUnavailable, VoicesUnavailable, VoiceMissing) as err:
            raise SynthesisFailed(classify(err)) from err
        except (RedisError, OSError) as err:
            logger.warning("request %s: speech unavailable: %r", request.request_id, err)
            raise SynthesisFailed(classify(err)) from err

    async def _queue(self, job: Job, owner: str | None) -> JobStream:
        try:
            return await self.dispatcher.submit(job, owner=owner)
        except asyncio.CancelledError:
            # Cut short while pushing: the job may be on the queue already, as this JSON (the push set its reply
            # channel and owner): it is taken off, and were a worker to claim it first, it is dropped unrun.
            await self.dispatcher.cancel(job.job_id, queued_as=job.to_json() if job.reply_to else None)
            raise

    async def check_voice(self, voice_id: str, workspace: str) -> None:
        """The workspace rule for a voice id a caller acting in ``workspace`` named, before anything is queued
        (:func:`~zsynth.services.voices.require_voice`): :class:`SynthesisFailed` when it is unknown, another
        workspace's clone, or the library does not answer."""
        try:
            await require_voice(self.library, self.voices, voice_id, workspace)
        except (VoiceMissing, VoicesUnavailable) as err:
            raise SynthesisFailed(classify(err)) from err

    async def build(self, request: SynthesisRequest) -> Prepared:
        """The job :meth:`speak` queues for ``request``: its voice resolved (a cloned voice this box lacks fetched
        from the library), its text prepared. Raises what :func:`classify` takes.

        Every job's text goes through the one text stage (:func:`zsynth.core.text.prepare.prepare`): options applied,
        words bounded for the engine.
        """
        await require_voice(self.library, self.voices, request.voice_id, request.workspace)
        engine, bound = self.settings.engine, self.settings.limits.max_word_chars
        spoken = await prepare(
            request.text,
            request.options,
            engine,
            self.dictionaries,
            workspace=request.workspace,
            limits=self.limits,
            max_word_chars=bound,
        )
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
            follows=request.follows,
        )
        return Prepared(job, spoken)


SYNTHESIS: Final = web.AppKey("synthesis", SynthesisService)


async def synthesis_context(app: web.Application) -> AsyncIterator[None]:
    """Build the application's one synthesis service over its dispatcher, and the dictionaries, voice catalog and
    library it has (register it after their contexts), under ``app[SYNTHESIS]``: every transport of a server then
    speaks through the same service, built the same way."""
    app[SYNTHESIS] = SynthesisService(
        app[SETTINGS],
        app[DISPATCHER],
        dictionaries=app.get(DICTIONARIES),
        voices=app.get(VOICES),
        library=app.get(VOICE_LIBRARY),
        tracing=app.get(TRACING),
    )
    yield
