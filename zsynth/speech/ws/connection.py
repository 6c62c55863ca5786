"""What both realtime sockets share: query parameters, in-band auth, one serialised sender, errors and closing."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import WSMsgType, web

from zsynth.core.audio import OutputFormat
from zsynth.core.codes import ApiCode, CodedError
from zsynth.core.languages import UnsupportedLanguage, check_language_code
from zsynth.core.ratelimit import TokenBucket
from zsynth.core.voice_settings import InvalidParameter, check_voice_settings
from zsynth.kit import jsonbody
from zsynth.kit.endpoints import Access, endpoint_of, parse_query
from zsynth.kit.gate import admit, may_call
from zsynth.services import single_use
from zsynth.services.auth import (
    AUTHENTICATOR,
    AuthError,
    Credential,
    Presented,
    read_credential,
    secret_from_message,
    secret_from_request,
    watch_credential,
)
from zsynth.services.keys import REDIS, REQUEST_ID, SETTINGS, WS_PER_CREDENTIAL
from zsynth.speech.access import SOCKET_GATE
from zsynth.speech.ws.query import RealtimeQuery

logger = logging.getLogger(__name__)

CLOSE_POLICY: Final = 1008
# Close reasons travel in a control frame: 125 bytes minus the 2-byte code.
MAX_REASON_BYTES: Final = 123
# Clients send text; a message above this is refused by aiohttp with close 1009.
#: The query parameter of an ElevenLabs single-use token, which opens the socket in place of a key.
SINGLE_USE_PARAMETER: Final = "single_use_token"


class WsError(CodedError):
    """Ends a socket with an error frame ``{"message", "error": code, "code": 1008}`` and a 1008 close."""


@dataclass(frozen=True, slots=True)
class StreamParams:
    """The validated query parameters of a stream-input or multi-stream-input socket."""

    voice_id: str
    fmt: OutputFormat
    model_id: str | None
    inactivity_s: float
    sync_alignment: bool
    auto_mode: bool
    language_code: str | None
    seed: int | None
    enable_logging: bool
    #: ``apply_text_normalization`` as sent (None: not sent), checked with the first message.
    normalization: str | None = None


def inactivity_error(params: StreamParams) -> WsError:
    """The upstream wording of the inactivity error."""
    return WsError(
        ApiCode.INPUT_TIMEOUT_EXCEEDED,
        f"Have not received a new text input within the timeout of {params.inactivity_s:.1f} seconds. Streaming "
        "input terminated. Please make sure to either feed the input in the timely manner, or to send the end of "
        'input text (empty string "") when done.',
    )


def ws_error(http_status: int, code: str, message: str, param: str | None) -> WsError:
    """A refused query parameter as the sockets answer it: an error frame and a 1008 close (the upgrade is done)."""
    return WsError(code, message)


def parse_params(request: web.Request) -> StreamParams:
    """Validate the socket's query parameters (:class:`~zsynth.speech.ws.query.RealtimeQuery`); raise WsError naming the
    bad one."""
    query = parse_query(request, RealtimeQuery, ws_error)
    inactivity = query.inactivity_timeout
    try:
        language = check_language_code(request.app[SETTINGS].engine, query.model_id, query.language_code)
    except UnsupportedLanguage as err:
        raise WsError(ApiCode.UNSUPPORTED_LANGUAGE, err.message) from err
    return StreamParams(
        # As asked: the synthesis service resolves it for each job, once the socket is authenticated (an unknown id
        # is spoken by the swap-out voice, a cloned voice this box lacks is fetched first, as on the HTTP routes).
        voice_id=request.match_info.get("voice_id", ""),  # the dialogue sockets name their voices in messages
        fmt=query.output_format,
        model_id=query.model_id,
        inactivity_s=request.app[SETTINGS].ws.inactivity_timeout_s if inactivity is None else inactivity,
        sync_alignment=query.sync_alignment,
        auto_mode=query.auto_mode,
        language_code=language,
        seed=query.seed,
        enable_logging=query.enable_logging,
        normalization=query.apply_text_normalization,
    )


class Connection:
    """One realtime socket: every send goes through here (one at a time), and so do errors and the close."""

    def __init__(
        self,
        request: web.Request,
        ws: web.WebSocketResponse,
        kind: str,
        *,
        on_authenticated: Callable[[], None] = lambda: None,
    ) -> None:
        self.on_authenticated = on_authenticated  # the socket no longer counts as unauthenticated
        self.request = request
        self.ws = ws
        self.socket_id = request.get(REQUEST_ID) or uuid.uuid4().hex
        self.kind = kind
        self.last_activity = time.monotonic()
        self._send_lock = asyncio.Lock()
        self.credential: Credential | None = None
        self._watcher: asyncio.Task[None] | None = None  # ends the socket when its credential stops being valid
        self._counted: str | None = None  # the fingerprint this socket counts against, once authenticated
        settings = request.app[SETTINGS]
        # Token bucket for client messages: refills at the configured rate, holds a burst of twice that.
        self._rate = settings.ws.max_messages_per_s
        # Seconds a send may block on a client that stopped reading before the socket is dropped (the write deadline
        # every transport shares: docs/architecture.md, "Flow control").
        self.send_timeout_s = settings.flow.write_timeout_s
        self._messages = TokenBucket(self._rate, 2 * self._rate)

    @property
    def closed(self) -> bool:
        """The socket is closed or closing: nothing more can be sent."""
        return self.ws.closed

    def touch(self) -> None:
        """Note activity (a client message or audio sent): resets the inactivity timer."""
        self.last_activity = time.monotonic()

    async def send(self, payload: dict[str, Any]) -> None:
        """Send one JSON frame; a client that stops reading for the write deadline is dropped."""
        if not self.ws.closed:
            await self.send_json_text(json.dumps(payload, separators=(",", ":"), ensure_ascii=False))

    async def send_json_text(self, data: str) -> None:
        """Send one frame already serialised as JSON (see :meth:`send`)."""
        async with self._send_lock:
            if self.ws.closed:
                return
            try:
                # asyncio.timeout, not wait_for: no extra task per frame on the audio path.
                async with asyncio.timeout(self.send_timeout_s):
                    await self.ws.send_str(data)
            except (ConnectionError, RuntimeError, TimeoutError) as err:
                logger.info("socket %s: send failed (%s); closing", self.socket_id, err)
                if self.request.transport is not None:
                    self.request.transport.abort()

    async def fail(self, err: WsError) -> None:
        """Send the error frame, then close with 1008 and the message as the (truncated) reason."""
        logger.info("socket %s: %s: %s", self.socket_id, err.code, err.message)
        await self.send({"message": err.message, "error": err.code, "code": CLOSE_POLICY})
        reason = err.message.encode()[:MAX_REASON_BYTES]
        while reason:
            try:
                reason.decode()
                break
            except UnicodeDecodeError:  # never cut a UTF-8 sequence in half
                reason = reason[:-1]
        await self.close(CLOSE_POLICY, reason)

    async def close(self, code: int = 1000, reason: bytes = b"") -> None:
        """Close the socket (idempotent); waiting for the client's close reply is bounded by the socket timeout."""
        if not self.ws.closed:
            async with self._send_lock:
                await self.ws.close(code=code, message=reason)

    async def receive(self, timeout: float | None, max_chars: int | None = None) -> dict[str, Any] | None:
        """The next JSON object from the client; None once the socket is closed; TimeoutError after ``timeout``.

        ``max_chars`` bounds the message before it is parsed (a first message read before authentication).
        """
        while True:
            msg = await self.ws.receive(timeout=timeout)
            # Queued messages are returned without a pause: yield once per message, so a client sending faster
            # than it is served holds the event loop for one message at a time, never for its whole backlog.
            await asyncio.sleep(0)
            if msg.type is WSMsgType.TEXT:
                self._spend_token()
                if max_chars is not None and len(msg.data) > max_chars:
                    raise WsError(
                        ApiCode.MESSAGE_TOO_LARGE,
                        f"The first message may hold at most {max_chars} characters before the key is verified.",
                    )
                try:
                    payload = jsonbody.loads(msg.data)  # also deep nesting and huge numbers: never an abrupt close
                except jsonbody.BadJson as err:
                    raise WsError(ApiCode.INVALID_JSON, "Messages must be JSON objects.") from err
                if not isinstance(payload, dict):
                    raise WsError(ApiCode.INVALID_JSON, "Messages must be JSON objects.")
                self.touch()
                return payload
            if msg.type is WSMsgType.BINARY:
                raise WsError(ApiCode.INVALID_MESSAGE, "Messages must be JSON text frames, not binary ones.")
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return None

    def _spend_token(self) -> None:
        if not self._messages.take():
            raise WsError(
                ApiCode.RATE_LIMIT_EXCEEDED, f"Too many messages: at most {self._rate:g} per second on one socket."
            )

    def release(self) -> None:
        """Stop counting this socket against its credential (called once, when it closes)."""
        if self._watcher is not None and self._watcher is not asyncio.current_task():
            self._watcher.cancel()
            self._watcher = None
        if self._counted is not None:
            counts = self.request.app[WS_PER_CREDENTIAL]
            counts[self._counted] -= 1
            if counts[self._counted] <= 0:
                del counts[self._counted]
            self._counted = None

    async def start(self, params: StreamParams, *, bos: bool) -> dict[str, Any] | None:
        """Authenticate and read the first message; None when the client closed first.

        A socket whose upgrade request carries a credential (header or query), or any socket on a server without
        keys, is authenticated at once and may stay quiet until ``inactivity_timeout``, as upstream allows: voice
        agents connect at start-up and say nothing until their user has spoken. Only a socket that still has to
        authenticate in its first message gets the shorter ZSYNTH_WS_FIRST_MESSAGE_TIMEOUT. With ``bos`` the first
        message must carry ``text`` (stream-input's initial ``{"text": " "}``).
        """
        if (
            self.request.app[AUTHENTICATOR].is_open
            or secret_from_request(self.request) is not None
            or self.single_use_token is not None
        ):
            await self.authenticate({})
            try:
                message = await self.receive(params.inactivity_s)
            except TimeoutError as err:
                raise inactivity_error(params) from err
            if message is not None and bos:
                self._check_bos(message)
            return message
        settings = self.request.app[SETTINGS]
        bound = settings.ws.first_message_timeout_s
        try:
            message = await self.receive(bound, settings.ws.first_message_max_bytes)
        except TimeoutError as err:
            raise WsError(
                ApiCode.MISSING_FIRST_MESSAGE,
                f"No initial message within {bound:g} seconds: send the key in the xi-api-key header or "
                "in the first message.",
            ) from err
        if message is None:
            return None
        self._check_bos(message)
        await self.authenticate(message)
        return message

    @staticmethod
    def _check_bos(message: dict[str, Any]) -> None:
        if not isinstance(message.get("text"), str):
            raise WsError(ApiCode.INVALID_MESSAGE, "The first message must carry a 'text' field (a single space).")

    async def authenticate(self, first: dict[str, Any]) -> Credential:
        """Verify the credential from the upgrade request or the first message against the route's declared access
        rule, as HTTP requests are (:func:`zsynth.kit.gate.admit`); WsError when refused.

        A full key in the ``?authorization=`` query is refused: a URL ends up in proxy and browser logs, so only
        short-lived tokens belong there.
        """
        presented = read_credential(self.request, SOCKET_GATE.query)
        secret = presented.secret or secret_from_message(first)
        endpoint = endpoint_of(self.request)
        access = endpoint.access if endpoint is not None else Access.FULL
        try:
            if self.single_use_token is not None:
                secret = None  # nothing to re-check later: the token is spent, and its socket lives on
                self.credential = await self._redeem(self.single_use_token, access)
            else:
                self.credential = await admit(self.request, SOCKET_GATE, access, Presented(secret, presented.in_query))
        except AuthError as err:
            raise WsError(err.code, err.message) from err
        self.on_authenticated()
        if self.credential.kind != "open":
            # A token counts against the key that minted it: two tokens of one key hold no more than the key.
            owner = self.credential.owner
            counts = self.request.app[WS_PER_CREDENTIAL]
            limit = self.request.app[SETTINGS].ws.max_sockets_per_credential
            if counts[owner] >= limit:
                raise WsError(
                    ApiCode.TOO_MANY_CONCURRENT_REQUESTS,
                    f"This key (its tokens included) already holds {limit} open realtime sockets on this server; "
                    "close one first.",
                )
            counts[owner] += 1
            self._counted = owner
        if secret is not None and self.credential.key_hash is not None and self._watcher is None:
            # Expiry and revocation are enforced for the socket's whole life, not only at connect.
            self._watcher = asyncio.create_task(self._watch(secret), name=f"ws-auth-{self.socket_id}")
        return self.credential

    @property
    def single_use_token(self) -> str | None:
        """The ``?single_use_token=`` this socket presents (ElevenLabs' browser pattern), None when absent."""
        return self.request.query.get(SINGLE_USE_PARAMETER, "").strip() or None

    async def _redeem(self, token: str, access: Access) -> Credential:
        """Spend a single-use token (:mod:`zsynth.services.single_use`): its credential, if its minting key still
        works and the route admits a token; AuthError otherwise."""
        app = self.request.app
        credential = await single_use.redeem(app[REDIS], token, "tts_websocket")
        await app[AUTHENTICATOR].check_minter(credential)
        if not may_call(credential, access, SOCKET_GATE.server):
            raise AuthError("insufficient_scope", SOCKET_GATE.insufficient_scope)
        return credential

    async def _watch(self, secret: str) -> None:
        """End the socket with an error frame once its credential expires or is revoked."""
        assert self.credential is not None

        async def refused(err: AuthError) -> None:
            await self.fail(WsError(err.code, err.message))

        await watch_credential(self.request.app[AUTHENTICATOR], secret, self.credential, refused)


def voice_settings_field(message: dict[str, Any]) -> dict[str, Any]:
    """A message's ``voice_settings``, checked as on HTTP (:mod:`zsynth.core.voice_settings`); {} when absent.

    Bad settings end the socket like any other bad parameter: an ``invalid_parameters`` error frame, close 1008.
    """
    try:
        return check_voice_settings(message.get("voice_settings"))
    except InvalidParameter as err:
        raise WsError(err.code, err.message) from err
