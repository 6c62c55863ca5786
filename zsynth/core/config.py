"""Typed settings for every zsynth process, read from ``ZSYNTH_*`` environment variables.

Settings are built once at start-up by :meth:`Settings.from_env` and passed down explicitly; nothing here runs at
import time. A malformed value raises :class:`SettingsError`, whose message names the variable. The fields sit in one
frozen group per concern (``settings.ws``, ``settings.avatar``, ``settings.redis``...), each field's metadata naming its
variable, whose name says nothing of the group (``ZSYNTH_REDIS_URL`` is ``settings.redis.url``, ``ZSYNTH_MAX_QUEUE``
``settings.jobs.max_queue``): :func:`variables` lists them all.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final, TypeVar

from zsynth.core import workspaces
from zsynth.core.engines import PROFILES, profile
from zsynth.core.redis_link import check_url

PREFIX: Final = "ZSYNTH_"
# Defaults of the AWS client settings, also used where no Settings are at hand (the keys admin command).
AWS_CONNECT_TIMEOUT_S: Final = 2.0
AWS_READ_TIMEOUT_S: Final = 4.0
AWS_MAX_ATTEMPTS: Final = 2

T = TypeVar("T")


class SettingsError(ValueError):
    """A ZSYNTH_* variable is missing or malformed; the message names it."""


# A URL's password: what lies between the user's ":" and the last "@" (a password may hold "/" or ":" typed raw), after
# "://", or, for a mistyped scheme ("redis:/user:pw@host"), after the start of a word: that loses the scheme, never
# the secret.
_URL_PASSWORD: Final = re.compile(r"(://)([^\s:@/]*):\S*@")
_BARE_PASSWORD: Final = re.compile(r"(^|[\s'\"(=/])([^\s:@/'\"]*):(?!//)\S*@")
# Query parameters that carry secrets (sentinel_password=, token=, ...).
_SECRET_PARAMETER: Final = re.compile(r"([?&;][\w.-]*(?:pass|secret|token|key)[\w.-]*=)[^&;\s'\"]*", re.IGNORECASE)


def redacted(text: str) -> str:
    """``text`` with the passwords of the URLs in it (``user:password@``) and secret query parameters replaced by
    ``***``: what a message about a setting (an error, a log line) may show of it."""
    for pattern in (_URL_PASSWORD, _BARE_PASSWORD):
        text = pattern.sub(lambda m: f"{m[1]}{m[2]}:***@", text)
    return _SECRET_PARAMETER.sub(lambda m: f"{m[1]}***", text)


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "zsynth"


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true/false")


def _parse_list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _parse_port(raw: str) -> int:
    port = int(raw)
    if not 0 <= port <= 65535:
        raise ValueError("expected a port number 0-65535")
    return port


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise ValueError("expected a number greater than 0")
    return value


def _non_negative_float(raw: str) -> float:
    value = float(raw)
    if not value >= 0:
        raise ValueError("expected a number of at least 0")
    return value


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError("expected a whole number of at least 1")
    return value


def _non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("expected a whole number of at least 0")
    return value


_SIZE_UNITS: Final = {
    "": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4, "t": 1000**4, "tb": 1000**4,
}  # fmt: skip


def _byte_size(raw: str) -> int:
    """Bytes, or a number with a unit: ``2GiB``, ``1.5G``, ``512MiB`` (k, M, G, T are powers of 1000; KiB... 1024)."""
    text = raw.strip().lower().replace(" ", "")
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = _SIZE_UNITS.get(text[len(number) :])
    if unit is None or not number:
        raise ValueError("expected bytes or a size such as 2GiB, 1500MB (0: the engine's default)")
    value = float(number) * unit
    if not 0 <= value < 2**63:
        raise ValueError("expected a size of at least 0")
    return int(value)


def _engine(raw: str) -> str:
    value = raw.strip().lower()
    if value not in PROFILES:
        raise ValueError(f"expected one of {', '.join(PROFILES)}")
    return value


def _redis_url(raw: str) -> str:
    # Plain URLs as redis-py takes them, and redis+sentinel:// (zsynth.core.redis_link).
    return check_url(raw)


def _cache_ttl(raw: str) -> float:
    value = float(raw)
    if not 0 <= value <= 30:
        raise ValueError("expected seconds between 0 and 30")
    return value


def _networks(raw: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    nets = []
    for item in _parse_list(raw):
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError as err:
            raise ValueError(f"{item!r} is not an IP address or CIDR network") from err
    return tuple(nets)


def _ice_servers(raw: str) -> tuple[str, ...]:
    urls = _parse_list(raw)
    for url in urls:
        if not url.startswith(("stun:", "stuns:", "turn:", "turns:")):
            raise ValueError(f"{url!r} is not a stun:, stuns:, turn: or turns: URL")
    return urls


def _video_size(raw: str) -> int:
    size = int(raw)
    if not 128 <= size <= 1080 or size % 2:
        raise ValueError("expected an even number of pixels from 128 to 1080")
    return size


def _http_url(raw: str) -> str | None:
    url = raw.strip().rstrip("/")
    if url and not url.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    return url or None


def _optional_str(raw: str) -> str | None:
    return raw.strip() or None


def _s3_prefix(raw: str) -> str:
    prefix = raw.strip().strip("/")
    return prefix + "/" if prefix else ""


def _optional_path(raw: str) -> Path | None:
    return Path(raw.strip()).expanduser() if raw.strip() else None


def _turbo_device(raw: str) -> str:
    value = raw.strip().lower()
    if value not in ("cuda", "cpu"):
        raise ValueError("expected cuda (the GPU CUDA_VISIBLE_DEVICES gives the worker) or cpu (tests only)")
    return value


def _turbo_dtype(raw: str) -> str:
    value = raw.strip().lower()
    if value not in ("float32", "bfloat16"):
        raise ValueError("expected float32 or bfloat16")
    return value


def _min_tokens(raw: str) -> int:
    value = int(raw)
    if value < 8:
        raise ValueError("expected a whole number of at least 8 (speech tokens; 25 make a second)")
    return value


def _voice_map(raw: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in _parse_list(raw):
        name, sep, voice_id = item.partition("=")
        if not sep or not name.strip() or not voice_id.strip():
            raise ValueError(f"{item!r} is not name=voice_id")
        pairs.append((name.strip(), voice_id.strip()))
    return tuple(pairs)


def _workspace(raw: str) -> str:
    return workspaces.check_name(raw.strip())


def _wyoming_uri(raw: str) -> tuple[str, int] | None:
    """``tcp://host:port`` (an IPv6 host in brackets) as its host and port; empty: off."""
    text = raw.strip()
    if not text:
        return None
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() != "tcp":
        raise ValueError("expected tcp://host:port (the only transport the Wyoming listener speaks)")
    host, colon, port = rest.rstrip("/").rpartition(":")
    if not colon or not host:
        raise ValueError("expected tcp://host:port, with a host and a port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, _parse_port(port)


# Each field's metadata names its environment variable (without the prefix) and its parser.
def _env(name: str, parse: Callable[[str], Any] = str, **kwargs: Any) -> Any:
    return field(metadata={"env": name, "parse": parse}, **kwargs)


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """Redis, which carries every job, heartbeat and shared record: where it is and how the front's pool waits."""

    url: str = _env("REDIS_URL", _redis_url, default="redis://127.0.0.1:6379/0")
    # The front's Redis connection pool: at most this many commands in flight; more wait up to the timeout (then
    # the request fails with 503 redis_unavailable) instead of failing at once.
    pool_size: int = _env("REDIS_POOL_SIZE", _positive_int, default=256)
    pool_timeout_s: float = _env("REDIS_POOL_TIMEOUT", _positive_float, default=5.0)
    # With a redis+sentinel:// URL: how long a front keeps pushing a job while Redis is unreachable (a failover takes
    # Sentinel's down-after time plus an election) before it answers 503 with Retry-After. Plain URLs answer at once.
    failover_wait_s: float = _env("REDIS_FAILOVER_WAIT", _positive_float, default=10.0)


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """The listeners of the three servers (speech API, avatar, demo): address, TLS, connections, who the client is,
    and what browsers and Host headers are let in."""

    host: str = _env("HOST", default="127.0.0.1")
    port: int = _env("PORT", _parse_port, default=8000)
    # Seconds a stopping front lets running HTTP streams finish before cancelling them.
    drain_timeout_s: float = _env("DRAIN_TIMEOUT", _positive_float, default=30.0)
    # Several fronts may share one port on a box (SO_REUSEPORT); the kernel balances connections.
    reuse_port: bool = _env("REUSE_PORT", _parse_bool, default=False)
    # Connections of the three servers (zsynth/kit/connections.py): seconds a new connection (or a kept-alive one that
    # starts its next request) has to finish its request headers (and its TLS handshake) before it is closed; seconds
    # an idle kept-alive connection stays open; connections one client address (an IPv6 /64) may hold open at once,
    # more are answered 503 and closed (0: no cap; the trusted proxies below, whose connections are every client's,
    # are never capped).
    header_timeout_s: float = _env("HEADER_TIMEOUT", _positive_float, default=10.0)
    keepalive_timeout_s: float = _env("KEEPALIVE_TIMEOUT", _positive_float, default=75.0)
    max_connections_per_address: int = _env("MAX_CONNECTIONS_PER_ADDRESS", _non_negative_int, default=256)
    # Origins a browser may call the API from ("*" any; empty: no CORS headers at all).
    cors_origins: tuple[str, ...] = _env("CORS_ORIGINS", _parse_list, default=("*",))
    # With no keys and "*" above, pages on other sites are refused POST, PUT, PATCH and DELETE unless this is true.
    cors_open_writes: bool = _env("CORS_OPEN_WRITES", _parse_bool, default=False)
    # Host names (besides localhost and IP addresses, which cannot be rebound) a request's Host may carry on a server
    # without keys and on the demo; others get 421 (a DNS-rebinding page's requests carry its own name). "*" allows
    # any. Set, it applies to servers with keys too.
    allowed_hosts: tuple[str, ...] = _env("ALLOWED_HOSTS", _parse_list, default=())
    # Reverse proxies (addresses or CIDRs, comma-separated) whose X-Forwarded-For names the client; empty: the header
    # is ignored and the peer address is the client. Limits per address apply to that client (IPv6: its /64).
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = _env(
        "TRUSTED_PROXIES", _networks, default=()
    )
    # TLS for serve, avatar and demo: both files (PEM) set = HTTPS and WSS on their ports; SIGHUP re-reads them.
    tls_cert_file: Path | None = _env("TLS_CERT_FILE", _optional_path, default=None)
    tls_key_file: Path | None = _env("TLS_KEY_FILE", _optional_path, default=None)

    @property
    def tls(self) -> bool:
        """Whether the servers speak HTTPS/WSS (both TLS files are set)."""
        return self.tls_cert_file is not None and self.tls_key_file is not None


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """Credentials: the static full keys, the portal keys table, and the bounds on look-ups and single-use tokens."""

    # Full keys: one in ZSYNTH_API_KEY and/or a comma-separated list in ZSYNTH_API_KEYS; none = open API.
    api_key: str | None = _env("API_KEY", _optional_str, default=None)
    api_keys: tuple[str, ...] = _env("API_KEYS", _parse_list, default=())
    # The portal keys table (DynamoDB, endpoint from the AWS_* variables): zsk_live_ keys and zsk_temp_ tokens.
    keys_table: str | None = _env("API_KEYS_TABLE", _optional_str, default=None)
    # How long a keys-table answer is reused (0-30 s): the longest a revoked key keeps working on a front.
    cache_ttl_s: float = _env("AUTH_CACHE_TTL", _cache_ttl, default=30.0)
    # Unspent single-use tokens (sutkn_, 15 minutes each) one key may hold, across every front; more are refused with
    # 429 until one is spent or expires. ElevenLabs states no limit: this bounds the records a minting loop leaves.
    single_use_max_unspent: int = _env("SINGLE_USE_MAX_UNSPENT", _positive_int, default=1000)
    # Failed look-ups (zsk_ secrets the keys table does not hold) one client address may make per minute; its next
    # ones get 429. A key or token that is found always passes.
    max_failures_per_min: int = _env("AUTH_MAX_FAILURES_PER_MIN", _positive_int, default=60)
    # Keys-table look-ups one front runs at once (cached answers need none); more wait up to 5 s, then 503. Bounds
    # what a flood of made-up keys costs DynamoDB and the front (botocore's connection pool holds 10).
    max_concurrent_lookups: int = _env("AUTH_MAX_CONCURRENT_LOOKUPS", _positive_int, default=10)

    @property
    def static_keys(self) -> tuple[str, ...]:
        """Every configured full key (ZSYNTH_API_KEY first, then ZSYNTH_API_KEYS), without duplicates."""
        keys = ((self.api_key,) if self.api_key else ()) + self.api_keys
        return tuple(dict.fromkeys(keys))


@dataclass(frozen=True, slots=True)
class AwsSettings:
    """Every DynamoDB and S3 call (zsynth/core/aws.py)."""

    # Seconds to connect, seconds a read may wait for bytes, and attempts in all (the first one included) before the
    # call fails.
    connect_timeout_s: float = _env("AWS_CONNECT_TIMEOUT", _positive_float, default=AWS_CONNECT_TIMEOUT_S)
    read_timeout_s: float = _env("AWS_READ_TIMEOUT", _positive_float, default=AWS_READ_TIMEOUT_S)
    max_attempts: int = _env("AWS_MAX_ATTEMPTS", _positive_int, default=AWS_MAX_ATTEMPTS)


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """One worker process: its name, its memory ceiling, its metrics endpoint and its heartbeat."""

    id: str = _env("WORKER_ID", default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    heartbeat_interval_s: float = _env("HEARTBEAT_INTERVAL", _positive_float, default=2.0)
    heartbeat_ttl_s: int = _env("HEARTBEAT_TTL", _positive_int, default=10)
    # A worker's memory ceiling (bytes, or with a unit: 2GiB): a job that takes its RSS past it ends with 400
    # input_too_complex and is never run again (workers/memory.py). 0: the engine's default (piper 2 GiB, turbo
    # 12 GiB, simulated 1 GiB).
    max_rss: int = _env("WORKER_MAX_RSS", _byte_size, default=0)
    # A worker's own Prometheus endpoint (workers/metrics.py): served on WORKER_METRICS_PORT plus WORKER_INDEX (the
    # systemd units set the index to their instance, so one base port serves a box), on WORKER_METRICS_HOST.
    # 0: no endpoint.
    metrics_port: int = _env("WORKER_METRICS_PORT", _parse_port, default=0)
    index: int = _env("WORKER_INDEX", _non_negative_int, default=0)
    metrics_host: str = _env("WORKER_METRICS_HOST", default="127.0.0.1")


@dataclass(frozen=True, slots=True)
class JobSettings:
    """Jobs and their scheduling (docs/scheduling.md): the queue, the fair shares, the pieces and the stream deadlines,
    and how long the front waits for audio."""

    # How long the front waits for a job's first audio (queueing included), then for each following chunk.
    first_chunk_timeout_s: float = _env("FIRST_CHUNK_TIMEOUT", _positive_float, default=30.0)
    chunk_timeout_s: float = _env("CHUNK_TIMEOUT", _positive_float, default=15.0)
    # Seconds a finished job's record (terminal state) stays in Redis for late readers.
    ttl_s: int = _env("JOB_TTL", _positive_int, default=600)
    # Jobs that may wait in the queue; beyond it requests get 429 system_busy with Retry-After.
    max_queue: int = _env("MAX_QUEUE", _positive_int, default=256)
    # Largest piece of a batch job (characters, whole sentences packed up to it; a longer sentence is one piece) a
    # worker speaks before it checks for waiting realtime or unstarted work and, if any, yields its slot.
    piece_max_chars: int = _env("PIECE_MAX_CHARS", _positive_int, default=100)
    # The most streams one worker holds open at once; 0: the engine's profile bound (piper 16, turbo 32, simulated 64).
    max_streams: int = _env("MAX_STREAMS", _non_negative_int, default=0)
    # A stream's deadline before its first chunk: when it was queued plus this budget (realtime; a batch job gets
    # BATCH_FIRST_AUDIO_BUDGET), and afterwards the moment its listener's playback would run dry, its first chunk's
    # time plus PLAYBACK_JITTER (the listener's jitter buffer) plus the audio sent.
    first_audio_budget_s: float = _env("FIRST_AUDIO_BUDGET", _positive_float, default=0.25)
    batch_first_audio_budget_s: float = _env("BATCH_FIRST_AUDIO_BUDGET", _positive_float, default=1.0)
    playback_jitter_s: float = _env("PLAYBACK_JITTER", _non_negative_float, default=0.15)
    # On an engine that speaks a sentence in one call (Piper), a job's first sentence, when long enough, is spoken
    # in two calls cut at its first clause mark (or a word boundary): its first audio comes sooner, for a little
    # prosody across the seam. false: every sentence is one call.
    first_piece: bool = _env("FIRST_PIECE", _parse_bool, default=True)
    # Jobs one credential may have queued or running from one front, as a share of MAX_QUEUE (0.5: 128 of 256): the
    # ceiling of the share below.
    credential_queue_share: float = _env("CREDENTIAL_QUEUE_SHARE", _positive_float, default=0.5)
    # The share itself is sized by what the workers can do: this many jobs per live worker (a fresh heartbeat), and
    # never fewer than CREDENTIAL_MIN_JOBS (docs/scheduling.md).
    credential_jobs_per_worker: int = _env("CREDENTIAL_JOBS_PER_WORKER", _positive_int, default=4)
    credential_min_jobs: int = _env("CREDENTIAL_MIN_JOBS", _positive_int, default=16)


@dataclass(frozen=True, slots=True)
class FlowSettings:
    """Flow control (docs/architecture.md "Flow control"): how far a job's audio runs ahead of its client."""

    # A job's window: the most encoded audio (bytes) its worker publishes ahead of what the front's transport has
    # taken, and at most FLOW_WINDOW_SECONDS of audio in the job's format; 0 turns pacing off.
    window_bytes: int = _env("FLOW_WINDOW", _byte_size, default=1024 * 1024)
    window_seconds: float = _env("FLOW_WINDOW_SECONDS", _positive_float, default=10.0)
    # The most audio (bytes) one front lets all its jobs hold in flight at once (in Redis's pub/sub buffer for the
    # front and in the jobs' buffers): kept well under Redis's client-output-buffer-limit for pub/sub (32 MB hard).
    front_audio_budget: int = _env("FRONT_AUDIO_BUDGET", _byte_size, default=16 * 1024 * 1024)
    # How long a transport may take to hand one piece of audio to a client that does not read (HTTP bodies; the
    # sockets' send deadline) before the client is cut and its job cancelled; a worker whose front takes nothing for
    # FLOW_WAIT seconds stops the job (its front died, or its client stopped reading).
    write_timeout_s: float = _env("WRITE_TIMEOUT", _positive_float, default=10.0)
    wait_s: float = _env("FLOW_WAIT", _positive_float, default=12.0)


@dataclass(frozen=True, slots=True)
class LimitSettings:
    """What one request may ask for (docs/limits.md): text, pauses, audio, bodies."""

    # Longest text one synthesis request may carry (characters).
    max_text_chars: int = _env("MAX_TEXT_CHARS", _positive_int, default=10000)
    # Output bounds per request: the break tags' pauses in all, and the audio the text stands for (estimated from
    # what is spoken, its words at a brisk reading pace plus the pauses: core/text/bounds.py). Past either: 400
    # before any job.
    max_pause_s: float = _env("MAX_PAUSE", _positive_float, default=60.0)
    max_audio_s: float = _env("MAX_AUDIO", _positive_float, default=900.0)
    # Longest run without white space an engine is given (longer ones get a space put in); unset: the engine's own
    # bound (zsynth/core/text/sentences.py ENGINE_WORD_CHARS: 100 for Piper, 300 for Turbo).
    max_word_chars: int | None = _env("MAX_WORD_CHARS", _positive_int, default=None)
    # Largest request body the front reads (bytes); cloning uploads are the big ones.
    max_body_bytes: int = _env("MAX_BODY_BYTES", _positive_int, default=25 * 1024 * 1024)
    # Largest JSON request body (bytes), on the speech API and the avatar server; MAX_BODY_BYTES is for multipart
    # uploads only. Past it: 413 request_too_large, unparsed.
    max_json_body_bytes: int = _env("MAX_JSON_BODY_BYTES", _positive_int, default=256 * 1024)
    # Most parts one multipart upload (cloning, editing, a PLS lexicon, the demo's clone) may hold; beyond it 413
    # too_many_parts, before the rest is parsed (each part costs the event loop, however small it is).
    max_multipart_parts: int = _env("MAX_MULTIPART_PARTS", _positive_int, default=64)


@dataclass(frozen=True, slots=True)
class WsSettings:
    """Realtime WebSockets (docs/realtime.md): timeouts, message sizes and rates, queued text, sockets not yet
    authenticated."""

    # Default idle time before a socket is ended (a client may ask for 5-180 s with
    # ?inactivity_timeout=), and how long a socket that has not authenticated yet may take to send its first message.
    inactivity_timeout_s: float = _env("WS_INACTIVITY_TIMEOUT", _positive_float, default=20.0)
    first_message_timeout_s: float = _env("WS_FIRST_MESSAGE_TIMEOUT", _positive_float, default=10.0)
    # Largest client message on a realtime socket (bigger ones close the socket with 1009, "message too big").
    max_message_bytes: int = _env("WS_MAX_MESSAGE_BYTES", _positive_int, default=1024 * 1024)
    # Client messages per second one socket may send (bursts of twice that are allowed).
    max_messages_per_s: float = _env("WS_MAX_MESSAGES_PER_S", _positive_float, default=100.0)
    # Open realtime sockets one credential may hold on one front (not applied when the API is open).
    max_sockets_per_credential: int = _env("WS_MAX_SOCKETS_PER_CREDENTIAL", _positive_int, default=100)
    # Text with no white space is released as a segment once this many characters are buffered.
    max_word_chars: int = _env("WS_MAX_WORD_CHARS", _positive_int, default=1000)
    # Characters and segments one context may hold waiting to be spoken; more ends the socket with an error frame.
    max_queued_chars: int = _env("WS_MAX_QUEUED_CHARS", _positive_int, default=50_000)
    max_queued_segments: int = _env("WS_MAX_QUEUED_SEGMENTS", _positive_int, default=500)
    # Sockets on one front that have not authenticated yet (more are refused with HTTP 503 before the upgrade), and
    # those of one client address (an IPv6 /64; behind ZSYNTH_TRUSTED_PROXIES the client they name) among them (more
    # get 429), so one address cannot hold every place that clients sending their key in the first message need.
    max_unauthenticated: int = _env("WS_MAX_UNAUTHENTICATED", _positive_int, default=1024)
    max_unauthenticated_per_address: int = _env("WS_MAX_UNAUTHENTICATED_PER_ADDRESS", _positive_int, default=16)
    # Largest first message of a socket that authenticates in it (read before the credential is known).
    first_message_max_bytes: int = _env("WS_FIRST_MESSAGE_MAX_BYTES", _positive_int, default=16 * 1024)


@dataclass(frozen=True, slots=True)
class VoicesSettings:
    """Voices and pronunciation dictionaries: the swap-out voice, cloning uploads, the shared bucket, OpenAI names."""

    # The swap-out voice serves synthesis for unknown voice ids (default: the first built-in voice).
    swapout_default_voice: str | None = _env("SWAPOUT_DEFAULT_VOICE", _optional_str, default=None)
    # Largest reference clip accepted by cloning (bytes of one uploaded file).
    clip_max_bytes: int = _env("VOICE_CLIP_MAX_BYTES", _positive_int, default=20 * 1024 * 1024)
    # The bucket that holds the voice library shared by every box (off when unset: voices stay on this box's disk);
    # objects live under <prefix><voice_id>/ (see zsynth/core/voices/bucket.py).
    bucket: str | None = _env("VOICES_BUCKET", _optional_str, default=None)
    prefix: str = _env("VOICES_PREFIX", _s3_prefix, default="voices/")
    # Pronunciation dictionaries live in the same bucket under this prefix (in <data_dir>/dictionaries without one).
    dictionaries_prefix: str = _env("DICTIONARIES_PREFIX", _s3_prefix, default="pronunciation-dictionaries/")
    # Memory a front gives to the dictionary versions it has read (bytes, least recently used dropped first).
    dictionary_cache_bytes: int = _env("DICTIONARY_CACHE_BYTES", _positive_int, default=32 * 1024 * 1024)
    # How long a request (front) or a job (worker) for a cloned voice this box lacks waits while it is fetched from
    # the bucket before the answer is 404 voice_not_found.
    fetch_wait_s: float = _env("VOICES_FETCH_WAIT", _positive_float, default=5.0)
    # How often every front and worker compares its disk with the bucket besides following the announcements (a safety
    # net for an announcement Redis did not take): removed voices go, missing ones come.
    resync_s: float = _env("VOICES_RESYNC", _positive_float, default=300.0)
    # How long a start waits for the comparison with the bucket before serving anyway (it goes on in the background).
    start_wait_s: float = _env("VOICES_START_WAIT", _positive_float, default=10.0)
    # A cloned-voice id the bucket does not have is remembered as missing for this long, in a list of at most this
    # many ids (the oldest leave first), so repeated made-up ids do not each cost bucket reads.
    missing_ttl_s: float = _env("VOICES_MISSING_TTL", _positive_float, default=30.0)
    missing_max: int = _env("VOICES_MISSING_MAX", _positive_int, default=4096)
    # OpenAI voice names (alloy, nova, ...) mapped to zsynth voice ids: "alloy=joe,nova=<clone id>". Names not
    # listed here, and ids no voice has, get the swap-out voice.
    openai: tuple[tuple[str, str], ...] = _env("OPENAI_VOICES", _voice_map, default=())


@dataclass(frozen=True, slots=True)
class TurboSettings:
    """The GPU engine (ZSYNTH_ENGINE=turbo; docs/gpu.md)."""

    # The checkpoint directory an operator downloaded once (no default: required).
    checkpoint: Path | None = _env("TURBO_CHECKPOINT", _optional_path, default=None)
    # cuda in production; cpu only when asked for explicitly (tests, benchmarks of the random-weight checkpoint).
    device: str = _env("TURBO_DEVICE", _turbo_device, default="cuda")
    # Cloned voices whose conditioning stays on the device (least recently used ones are dropped; disk keeps all).
    voice_cache: int = _env("TURBO_VOICE_CACHE", _positive_int, default=64)
    # Most speech tokens per text piece (25 a second; the model's own cap is 1000 = 40 s).
    max_tokens: int = _env("TURBO_MAX_TOKENS", _min_tokens, default=1000)
    # Speech tokens in the first streamed chunk of a piece (25 make a second); each later chunk doubles up to the
    # largest (workers/engines/turbo.py: chunk_schedule).
    first_chunk_tokens: int = _env("TURBO_FIRST_CHUNK_TOKENS", _min_tokens, default=8)
    chunk_tokens: int = _env("TURBO_CHUNK_TOKENS", _min_tokens, default=128)
    # Perth watermark on every chunk (the upstream generate() always applies it).
    watermark: bool = _env("TURBO_WATERMARK", _parse_bool, default=True)
    # T3's decode step as CUDA graphs, one per attention length bucket, captured before READY (GPU only).
    cuda_graphs: bool = _env("TURBO_CUDA_GRAPHS", _parse_bool, default=True)
    # bfloat16 runs T3 in bf16 on the GPU (S3Gen's flow and vocoder stay fp32; the CPU always runs float32). The
    # default: on one H100 it is what meets the first-audio and RTF targets (docs/gpu-figures.md), and its next-token
    # distributions differ from float32's by a total variation of 0.0035 on average.
    dtype: str = _env("TURBO_DTYPE", _turbo_dtype, default="bfloat16")


@dataclass(frozen=True, slots=True)
class SimSettings:
    """The simulated engine (load tests only; workers/engines/simulated.py)."""

    # Load tests only: the simulated engine needs this explicit second switch (see workers/engines/simulated.py).
    load_test_only: bool = _env("LOAD_TEST_ONLY", _parse_bool, default=False)
    chunk_hold_s: float = _env("SIM_CHUNK_HOLD", _positive_float, default=0.05)
    chunk_audio_s: float = _env("SIM_CHUNK_AUDIO", _positive_float, default=0.5)


@dataclass(frozen=True, slots=True)
class AvatarSettings:
    """The avatar server (``zsynth avatar``; docs/avatar.md): port, live sessions per box, timeouts, ICE, the default
    voice and the /connect offers."""

    port: int = _env("AVATAR_PORT", _parse_port, default=8100)
    max_sessions: int = _env("AVATAR_MAX_SESSIONS", _positive_int, default=4)
    # Live sessions one session token may hold at once (full keys are limited by the box's limit only).
    sessions_per_token: int = _env("AVATAR_SESSIONS_PER_TOKEN", _positive_int, default=2)
    # speak commands per session: a sustained rate per second with a burst, and how many may wait unspoken.
    speak_rate: float = _env("AVATAR_SPEAK_RATE", _positive_float, default=2.0)
    speak_burst: int = _env("AVATAR_SPEAK_BURST", _positive_int, default=10)
    speak_queue: int = _env("AVATAR_SPEAK_QUEUE", _positive_int, default=16)
    # A session with no command and no speech for this long ends (HeyGen's activity_idle_timeout default).
    idle_timeout_s: float = _env("AVATAR_IDLE_TIMEOUT", _positive_float, default=120.0)
    # A peer connection that is not connected this long after /connect is closed.
    connect_timeout_s: float = _env("AVATAR_CONNECT_TIMEOUT", _positive_float, default=20.0)
    # STUN/TURN URLs offered to aiortc; none by default (a STUN lookup stalls offline hosts for seconds).
    ice_servers: tuple[str, ...] = _env("AVATAR_ICE_SERVERS", _ice_servers, default=())
    ice_username: str | None = _env("AVATAR_ICE_USERNAME", _optional_str, default=None)
    ice_credential: str | None = _env("AVATAR_ICE_CREDENTIAL", _optional_str, default=None)
    voice_id: str = _env("AVATAR_VOICE_ID", default="21m00Tcm4TlvDq8ikWAM")
    size: int = _env("AVATAR_SIZE", _video_size, default=512)
    # /connect offers: the largest SDP taken (a browser's is 4-8 KiB; larger gets 413 before any parsing), the most
    # distinct ICE candidates it may list (more get 400), and whether the server may send connectivity checks to
    # loopback, private, link-local and mDNS (.local) candidates (off: they are dropped; such peers still connect
    # through their own checks).
    max_sdp_bytes: int = _env("AVATAR_MAX_SDP_BYTES", _positive_int, default=32 * 1024)
    max_remote_candidates: int = _env("AVATAR_MAX_REMOTE_CANDIDATES", _positive_int, default=16)
    allow_private_candidates: bool = _env("AVATAR_ALLOW_PRIVATE_CANDIDATES", _parse_bool, default=False)


@dataclass(frozen=True, slots=True)
class DemoSettings:
    """The demo page (``zsynth demo``): its port, and the base URLs of the speech API and the avatar server it uses
    (unset: this box's ZSYNTH_PORT / ZSYNTH_AVATAR_PORT, reached on the host name the page was opened with)."""

    port: int = _env("DEMO_PORT", _parse_port, default=8200)
    api_url: str | None = _env("DEMO_API_URL", _http_url, default=None)
    avatar_url: str | None = _env("DEMO_AVATAR_URL", _http_url, default=None)


@dataclass(frozen=True, slots=True)
class WyomingSettings:
    """The Wyoming listener (Home Assistant; zsynth/speech/wyoming, docs/home-assistant.md)."""

    # Where the front answers the Wyoming protocol: tcp://host:port (unset: no listener; `zsynth dev` sets
    # tcp://127.0.0.1:10200). Wyoming carries no credentials: a host other than loopback is warned about at start.
    uri: tuple[str, int] | None = _env("WYOMING_URI", _wyoming_uri, default=None)
    # Announce the listener as <name>._wyoming._tcp.local. over zeroconf (mDNS) so Home Assistant finds it (unset: no
    # announcement; needs the `wyoming` extra, python-zeroconf, and a network that carries multicast).
    zeroconf: str | None = _env("WYOMING_ZEROCONF", _optional_str, default=None)
    # Client networks (addresses or CIDRs, comma-separated) the listener answers; others are closed at once. Empty:
    # every client that can reach the address.
    allow: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = _env("WYOMING_ALLOW", _networks, default=())
    # Seconds a Wyoming connection may stay silent while nothing is being spoken for it, then it is closed.
    idle_timeout_s: float = _env("WYOMING_IDLE_TIMEOUT", _positive_float, default=30.0)
    # Wyoming connections one client address (an IPv6 /64) may hold at once; more get an error event and a close.
    max_connections_per_address: int = _env("WYOMING_MAX_CONNECTIONS_PER_ADDRESS", _positive_int, default=16)
    # Wyoming connections all clients together may hold at once (a client can hold many addresses: a /8 of loopback,
    # an IPv6 block); more get an error event and a close.
    max_connections: int = _env("WYOMING_MAX_CONNECTIONS", _positive_int, default=64)
    # The workspace every Wyoming connection acts in (zsynth.core.workspaces): the clones `describe` lists and a
    # synthesis may name, and the queue owner its jobs count against. Wyoming carries no credential.
    workspace: str = _env("WYOMING_WORKSPACE", _workspace, default="default")


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """Logs and traces."""

    # OpenTelemetry traces over OTLP/HTTP (zsynth/core/tracing.py; the otel extra): the collector's base URL
    # (http://127.0.0.1:4318, /v1/traces is added) or its full traces URL. Unset: no traces, nothing imported.
    otlp_endpoint: str | None = _env("OTLP_ENDPOINT", _http_url, default=None)
    log_level: str = _env("LOG_LEVEL", default="INFO")
    log_json: bool = _env("LOG_JSON", _parse_bool, default=False)


def _group(cls: type[T]) -> T:
    # A group's field names its class in its metadata (GROUPS is read from them).
    return field(default_factory=cls, metadata={"group": cls})


@dataclass(frozen=True, slots=True)
class Settings:
    """Configuration shared by the front, the workers and the command line: a few box-wide fields, and one frozen
    group per concern (``settings.ws.max_message_bytes``, ``settings.avatar.port``, ``settings.redis.url``).

    The box-wide fields stay at the top because every concern reads them: the engine (its profile sizes the worker
    count, the threads, the stream and memory bounds), where the data lives, and how many workers and threads a box
    runs. Tests and tools change a copy with :meth:`with_`; ``Settings(...)`` takes the box-wide fields and whole
    groups. Each field's metadata names its variable; :func:`variables` lists them all.
    """

    engine: str = _env("ENGINE", _engine, default="piper")
    data_dir: Path = _env("DATA_DIR", Path, default_factory=_default_data_dir)
    # Threads the engine may use for one job (onnxruntime intra-op threads for Piper; torch's on a CPU Turbo run).
    # 0: chosen from the cores at start (see :func:`default_engine_threads`).
    engine_threads: int = _env("ENGINE_THREADS", _non_negative_int, default=0)
    # Worker processes `zsynth dev` starts. 0: chosen from the cores (see :func:`default_workers`).
    workers: int = _env("WORKERS", _non_negative_int, default=0)

    redis: RedisSettings = _group(RedisSettings)
    http: HttpSettings = _group(HttpSettings)
    auth: AuthSettings = _group(AuthSettings)
    aws: AwsSettings = _group(AwsSettings)
    worker: WorkerSettings = _group(WorkerSettings)
    jobs: JobSettings = _group(JobSettings)
    flow: FlowSettings = _group(FlowSettings)
    limits: LimitSettings = _group(LimitSettings)
    ws: WsSettings = _group(WsSettings)
    voices: VoicesSettings = _group(VoicesSettings)
    turbo: TurboSettings = _group(TurboSettings)
    sim: SimSettings = _group(SimSettings)
    avatar: AvatarSettings = _group(AvatarSettings)
    demo: DemoSettings = _group(DemoSettings)
    wyoming: WyomingSettings = _group(WyomingSettings)
    telemetry: TelemetrySettings = _group(TelemetrySettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``env`` (default: the process environment); ``overrides`` (the keys :meth:`with_`
        takes) win over both."""
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in GROUPS:
                values[f.name] = GROUPS[f.name](**_read(fields(GROUPS[f.name]), source))
            else:
                values.update(_read((f,), source))
        settings = cls(**values).with_(**overrides)
        if (settings.http.tls_cert_file is None) != (settings.http.tls_key_file is None):
            raise SettingsError("ZSYNTH_TLS_CERT_FILE and ZSYNTH_TLS_KEY_FILE must be set together (or neither).")
        return settings

    def with_(self, **changes: Any) -> Settings:
        """A copy with ``changes``: a box-wide field or a whole group by its name (``data_dir=``, ``ws=``), or one field
        of a group as ``<group>_<field>`` (``ws_max_message_bytes=``, ``redis_url=``, ``worker_id=``).

        Raises TypeError for a name that is neither (dataclasses.replace would say the same of a misspelt field).
        """
        top: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {}
        for key, value in changes.items():
            if key in _TOP_FIELDS:
                if key in GROUPS and not isinstance(value, GROUPS[key]):
                    raise TypeError(f"Settings.{key} takes a {GROUPS[key].__name__}, not {type(value).__name__}")
                top[key] = value
                continue
            group, _, name = key.partition("_")
            if group not in GROUPS or name not in _GROUP_FIELDS[group]:
                raise TypeError(
                    f"Settings has no field {key!r} (a group's field is <group>_<field>: ws_max_word_chars)"
                )
            nested.setdefault(group, {})[name] = value
        for group, values in nested.items():
            top[group] = replace(top.get(group, getattr(self, group)), **values)
        return replace(self, **top)

    @property
    def worker_count(self) -> int:
        """Worker processes ``zsynth dev`` starts: ZSYNTH_WORKERS, or :func:`default_workers` when it is 0."""
        return self.workers or default_workers(self.engine)

    @property
    def engine_thread_count(self) -> int:
        """Threads one engine job uses: ZSYNTH_ENGINE_THREADS, or :func:`default_engine_threads` when it is 0."""
        return self.engine_threads or default_engine_threads(self.engine)

    @property
    def voices_dir(self) -> Path:
        """Where cloned voices live on this box."""
        return self.data_dir / "voices"


# The groups of Settings, by the attribute that holds each (settings.ws, settings.avatar, ...).
GROUPS: Final[dict[str, type[Any]]] = {f.name: f.metadata["group"] for f in fields(Settings) if "group" in f.metadata}
_TOP_FIELDS: Final = frozenset(f.name for f in fields(Settings))
_GROUP_FIELDS: Final = {name: frozenset(f.name for f in fields(cls)) for name, cls in GROUPS.items()}


def _read(group_fields: Iterable[Field[Any]], source: Mapping[str, str]) -> dict[str, Any]:
    """The values of the fields whose variables ``source`` sets, parsed; a malformed one raises SettingsError."""
    values: dict[str, Any] = {}
    for f in group_fields:
        var = PREFIX + f.metadata["env"]
        raw = source.get(var)
        if raw is None:
            continue
        try:
            values[f.name] = f.metadata["parse"](raw)
        except (TypeError, ValueError) as err:
            # The journal keeps this line: a URL's password never goes in it (nor does it in the err's words).
            raise SettingsError(f"{var}={redacted(raw)!r} is invalid: {redacted(str(err))}") from None
    return values


def variables() -> dict[str, str]:
    """Every ZSYNTH_* variable Settings reads, with where its value lands: ``ws.max_message_bytes``, ``engine``."""
    found: dict[str, str] = {}
    for f in fields(Settings):
        if f.name in GROUPS:
            found.update({PREFIX + g.metadata["env"]: f"{f.name}.{g.name}" for g in fields(GROUPS[f.name])})
        else:
            found[PREFIX + f.metadata["env"]] = f.name
    return found


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity mask (taskset, a container's cpuset), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_workers(engine: str, cores: int | None = None) -> int:
    """How many workers a box runs by default.

    Piper (CPU): one per core. Two onnxruntime calls of one thread each on two cores make more audio per second
    than one call of two threads (VITS is many small operators; splitting each over threads gains less than running
    two jobs side by side), so the box's throughput needs as many jobs in flight as cores. Other engines: one (a GPU
    engine runs one worker per GPU, each named by its systemd instance). The engine's profile says which.
    """
    return max(1, cores or usable_cores()) if profile(engine).workers_per_box == "per_core" else 1


def default_engine_threads(engine: str, cores: int | None = None) -> int:
    """Threads one engine job uses by default.

    Piper (CPU): two where there are two cores, so a job alone on the box (the one user waiting) is spoken on both;
    while another worker of the box is busy a Piper worker speaks on one (see :mod:`workers.cores`). Other engines:
    one. The engine's profile says which.
    """
    return max(1, min(2, cores or usable_cores())) if profile(engine).threads_per_job == "up_to_two" else 1
