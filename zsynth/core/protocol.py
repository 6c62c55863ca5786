"""The Redis protocol between fronts and workers: every key and channel name, the job record and the events.

Flow of one job:

1. Each front process SUBSCRIBEs once, at start, to its own :func:`reply_channel` and waits for Redis to confirm,
   because pub/sub drops messages nobody listens to. Every job it submits names that channel in ``reply_to``, and
   every event carries its job id, so one subscription serves all of the front's jobs (no SUBSCRIBE/UNSUBSCRIBE
   round trips per job).
2. The front pushes the job JSON on :data:`QUEUE` with :data:`PUSH_BOUNDED_LUA` (which also bounds the queue).
   Fresh jobs (realtime, and batch jobs that have not started) are claimed owner by owner in rounds, realtime
   before batch within a round and within one owner; the remainders of batch jobs that gave up their slot come
   last, first come, first served.
3. A worker claims with ``BLMOVE QUEUE processing_key(worker) RIGHT LEFT``: atomic, one job at a time, and a dead
   worker's job stays visible in its in-flight list.
4. The worker speaks the job one piece (a few sentences) at a time. After a piece of a batch job, when the next
   job to be claimed is realtime or has not started (:data:`SHOULD_YIELD_LUA`), it gives up the slot: the rest of
   the job goes back to the queue as a remainder whose ``part``, ``seq`` and ``sample_offset`` continue where it
   stopped, and the waiting job is claimed in the same step (:data:`YIELD_LUA`). The client sees one stream.
5. The worker publishes ``chunk`` events with sequence numbers to the job's ``reply_to``, then exactly one terminal
   event (``done`` or ``error``), writes the terminal state to :func:`job_key`, and LREMs the job from its in-flight
   list.
6. To cancel, the front sets :func:`cancel_key` (so a queued job is dropped unrun) and publishes the job id on
   :data:`CANCEL_CHANNEL` (so a running job stops within one chunk).

This module imports neither aiohttp nor an engine: the front and the workers both use it.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Final, Literal

PREFIX: Final = "zsynth:"
QUEUE: Final = PREFIX + "queue"  # list of job JSON; workers BLMOVE from the right
CANCEL_CHANNEL: Final = PREFIX + "cancel"  # pub/sub: job ids to stop now
WORKERS: Final = PREFIX + "workers"  # set of worker ids that have ever registered
# Counter: failed voice-bucket operations (the name is from when voices were mirrored to S3 in the background).
VOICE_MIRROR_FAILURES: Final = PREFIX + "voices:mirror_failures"
# Counter: tombstones a front's start-up (or resync) put in the bucket for removals made through its API while the
# bucket did not know of them (each is also logged).
VOICE_TOMBSTONES_UPLOADED: Final = PREFIX + "voices:tombstones_uploaded"
# Counter: delete announcements on VOICES_LOG that the bucket did not confirm (no tombstone): ignored.
VOICE_DELETES_UNCONFIRMED: Final = PREFIX + "voices:deletes_unconfirmed"

# ----- the voice library across boxes (see zsynth/core/voices/library.py) ---------------------------------------------
# Stream of voice changes, one entry per add, edit, removal or saved settings: fields op (put, delete, settings),
# voice_id, revision and box. Every front and worker reads it with XREAD BLOCK (live) from the last entry it applied
# (catch-up after a disconnection or a restart); trimmed to about VOICES_LOG_MAXLEN entries.
VOICES_LOG: Final = PREFIX + "voices:log"
VOICES_LOG_MAXLEN: Final = 10000
VOICE_BOX_PREFIX: Final = PREFIX + "voices:box:"  # + box id: JSON {"clones", "bucket"} of a live front, with a TTL


def voice_box_key(box_id: str) -> str:
    """A front's announcement that its box (a data directory) is up, how many clones it holds, and its bucket."""
    return VOICE_BOX_PREFIX + box_id


Priority = Literal["realtime", "batch"]

EventKind = Literal["chunk", "done", "error"]


def processing_key(worker_id: str) -> str:
    """The worker's in-flight list: holds at most the one job it is running."""
    return f"{PREFIX}processing:{worker_id}"


def worker_ids(members: set[bytes] | set[str] | set[bytes | str]) -> list[str]:
    """The worker ids of a reply of ``SMEMBERS WORKERS``, sorted (the clients here return bytes; redis-py types
    replies as bytes or str)."""
    return sorted(m.decode() if isinstance(m, bytes) else m for m in members)


def heartbeat_key(worker_id: str) -> str:
    """A TTL'd key the worker refreshes while alive; its value is a small JSON status."""
    return f"{PREFIX}heartbeat:{worker_id}"


JOB_KEY_PREFIX: Final = PREFIX + "job:"


def job_key(job_id: str) -> str:
    """Hash with a job's progress (first chunk time) and terminal state, kept job_ttl seconds for late readers."""
    return JOB_KEY_PREFIX + job_id


def reply_channel(front_id: str) -> str:
    """Pub/sub channel carrying the events of every job one front process submitted."""
    return f"{PREFIX}replies:{front_id}"


def cancel_key(job_id: str) -> str:
    """Set when the job's client has gone; a worker that sees it skips or stops the job."""
    return f"{PREFIX}cancel:{job_id}"


SINGLE_USE_TOKEN_PREFIX: Final = PREFIX + "single_use_token:"  # + the token's SHA-256: JSON of its minter, with a TTL


def single_use_token_key(token_hash: str) -> str:
    """A single-use token's record (never the token itself); GETDEL redeems it, so only one front ever accepts it."""
    return SINGLE_USE_TOKEN_PREFIX + token_hash


SINGLE_USE_UNSPENT_PREFIX: Final = PREFIX + "single_use_unspent:"  # + the minting key's fingerprint: a sorted set


def single_use_unspent_key(owner: str) -> str:
    """The unspent single-use tokens of one key (``owner``, its fingerprint): a sorted set of token hashes scored by
    their expiry (unix seconds). :data:`SINGLE_USE_MINT_LUA` trims and counts it; a redemption removes its token."""
    return SINGLE_USE_UNSPENT_PREFIX + owner


# Mint a single-use token unless its key already holds ARGV[5] unspent ones: trim the key's set of the expired, count
# what is left, and store the record and its place in one atomic step, so fronts minting for one key at once never
# pass the cap together. KEYS: the token's record (single_use_token_key), the key's set (single_use_unspent_key).
# ARGV: the record JSON, its TTL (s), now, the token's expiry (unix s), the cap, the token's hash. Returns 0 when
# minted, else the seconds until the key's oldest unspent token expires (at least 1). The set lives as long as its
# newest token.
SINGLE_USE_MINT_LUA: Final = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return math.max(1, math.ceil(tonumber(oldest[2]) - tonumber(ARGV[3])))
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2], 'NX')
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 0
"""


def credit_key(job_id: str) -> str:
    """A job's flow-control credits: a list the front RPUSHes grants on and the job's worker BLPOPs.

    Each entry is ``"<consumed> <granted>"`` (byte counts of the job's encoded audio, absolute, so only the newest
    matters): the transport has taken ``consumed`` bytes, and the worker may have published up to ``granted``. The
    entry :data:`CREDIT_CANCEL` wakes a waiting worker at once when the job's client has gone.
    """
    return f"{PREFIX}credit:{job_id}"


CREDIT_CANCEL: Final = "cancel"


# Field of job_key set with the first chunk: a job whose audio started is never given to another worker.
STARTED_FIELD: Final = "first_chunk_at"
# Field of job_key set (to the RSS in bytes) when the job took its worker past its memory ceiling: such a job is never
# run again, by a reaper, a restarted worker or a worker claiming its remainder; it ends with
# ErrorCode.INPUT_TOO_COMPLEX.
MEMORY_FIELD: Final = "memory_exceeded"
# Field of job_key that says who owns a job: the first worker to claim it writes its id there (HSETNX), or a front
# writes RESUBMITTED after a Redis failover when the job was queued, never claimed, and missing on the new master.
# One atomic HSETNX decides: a worker that finds RESUBMITTED drops the job unrun (its front has queued it again under
# a new id), a worker that finds another owner drops its copy silently (a duplicate push), and a front that finds a
# worker's id leaves the job to that worker. Whoever puts an unstarted job back in the queue (a reaper, a worker that
# lost Redis before the audio) clears the field in the same step.
OWNER_FIELD: Final = "owner"
RESUBMITTED: Final = "re-submitted"
# Field of job_key with the terminal event's sequence number: a front that recovers the terminal state after lost
# events compares it with the events it has (``lost_events`` when they differ, never a silently shorter audio).
SEQ_FIELD: Final = "seq"
# A job whose worker died is run again at most once in all (when its audio had not started), never when marked above.
MAX_ATTEMPTS: Final = 2


class ErrorCode(StrEnum):
    """The code of a failed job: in a worker's ``error`` event on Redis, or raised by the front's dispatcher.

    The values are the wire form and never change (a front and a worker of different versions share the queue). A
    front may still meet a code that is not here (from a newer worker): it is handled as an internal failure.
    """

    # Sent by a worker.
    INPUT_TOO_COMPLEX = "input_too_complex"  # the job took its worker past its memory ceiling: retrying fails again
    WORKER_RESTARTED = "worker_restarted"  # the worker restarted during the job
    WORKER_DIED = "worker_died"  # the worker died during the job, which is not run again (a reaper says so)
    WORKER_STOPPING = "worker_stopping"  # the worker was told twice to stop during the job
    DEADLINE_EXCEEDED = "deadline_exceeded"  # the job waited in the queue past its start deadline
    CANCELLED = "cancelled"  # the job's client went away
    VOICE_NOT_FOUND = "voice_not_found"  # the worker cannot load the job's voice (it never speaks another one)
    VOICE_STORAGE_UNAVAILABLE = "voice_storage_unavailable"  # the voice library's storage did not answer
    INVALID_OUTPUT_FORMAT = "invalid_output_format"  # the job names an output format the worker cannot encode
    SYNTHESIS_FAILED = "synthesis_failed"  # the engine raised
    # The job's front took none of its audio for longer than the flow-control wait (a client that stopped reading,
    # or a front that died): the worker stopped it to free its slot.
    CLIENT_TOO_SLOW = "client_too_slow"
    AUDIO_TOO_LONG = "audio_too_long"  # the job's audio passed its worker's hard bound on audio seconds per job
    REDIS_FAILOVER = "redis_failover"  # the worker lost Redis (a failover) after the job's audio had started
    # Raised by the front's dispatcher.
    QUEUE_FULL = "queue_full"  # the queue, or the credential's share of it, is full
    REDIS_UNAVAILABLE = "redis_unavailable"  # Redis did not take the job, or the front lost it
    TIMEOUT = "timeout"  # no event within the first-chunk or per-chunk deadline
    LOST_EVENTS = "lost_events"  # an event's sequence number skipped one
    SHUTTING_DOWN = "shutting_down"  # the front is stopping
    # An error event without a code (never sent by a worker of this version).
    ERROR = "error"


# A terminal event published by someone other than the job's worker (a reaper) carries this sequence number:
# the front accepts it whatever it has counted so far.
ANY_SEQ: Final = -1

# The queue's order, shared by PUSH_BOUNDED_LUA and YIELD_LUA. From the right (the end workers claim from) the queue
# holds the fresh jobs (realtime segments, batch jobs that have not started, and the remainders of realtime segments
# that gave way), then the remainders of batch jobs that yielded their slot (pushed at the far left by YIELD_LUA,
# first come, first served). The fresh jobs are served owner by owner, in rounds, kept in order of (round, class),
# realtime before batch within a round. A job's round is the number of its owner's jobs ahead of it in the queue, or
# its ``turn`` (its owner's unfinished jobs on its front when it was pushed, running ones included) when that is
# more. place() puts a new job after its owner's last job (a realtime one: after its owner's last realtime job, so
# before its owner's batch jobs) and before the first job whose round is greater than its own, or equal with a later
# class; a realtime remainder (``first``) goes by its turn alone, and ahead of its owner's other jobs. So one owner's
# hundred jobs, queued or running, never put another owner's first job behind all of them, and one owner's own
# realtime jobs still go ahead of its own batch jobs. A job is read from its first bytes (Job.to_json writes
# QUEUE_LEAD_FIELDS first); only a job written otherwise (a reaper's cjson) is decoded. The scan stops at the first
# batch remainder. A placement costs one LRANGE of the fresh jobs and one LINSERT scan in C.
_QUEUE_ORDER_LUA: Final = """
local function head(raw)
  local owner, priority, part, turn =
    string.match(raw, '^{"owner":"([^"]*)","priority":"(%a+)","part":(%d+),"turn":(%d+)')
  if not owner then
    local ok, job = pcall(cjson.decode, raw)
    if not ok or type(job) ~= 'table' then return '', 2, 0 end
    owner = job.owner
    if type(owner) ~= 'string' then owner = '' end
    priority, part, turn = job.priority, job.part, job.turn
  end
  turn = tonumber(turn) or 0
  if priority == 'realtime' then return owner, 0, turn end
  if (tonumber(part) or 0) ~= 0 then return owner, 2, turn end
  return owner, 1, turn
end
local function place(queue, new, first)
  local owner, class, round = head(new)
  local n = redis.call('LLEN', queue)
  local raws, rounds, classes, ahead = {}, {}, {}, {}
  local mine, floor, own_first, stop, i = 0, 0, nil, nil, 0
  while i < n and not stop do
    local page = redis.call('LRANGE', queue, -(i + 64), -(i + 1))
    for k = #page, 1, -1 do
      local o, c, turn = head(page[k])
      if c == 2 then stop = page[k] break end
      local idx = #raws + 1
      raws[idx] = page[k]
      rounds[idx] = math.max(turn, ahead[o] or 0)
      classes[idx] = c
      ahead[o] = (ahead[o] or 0) + 1
      if o == owner then
        own_first = own_first or idx
        if class == 1 or c == 0 then
          mine = mine + 1
          floor = idx
        end
      end
    end
    i = i + 64
  end
  if first then
    floor = 0
  else
    round = math.max(round, mine)
  end
  for idx = floor + 1, #raws do
    if (first and idx == own_first) or rounds[idx] > round or (rounds[idx] == round and classes[idx] > class) then
      redis.call('LINSERT', queue, 'AFTER', raws[idx], new)
      return
    end
  end
  if #raws > 0 then
    redis.call('LINSERT', queue, 'BEFORE', raws[#raws], new)
  elseif stop then
    redis.call('LINSERT', queue, 'AFTER', stop, new)
  else
    redis.call('RPUSH', queue, new)
  end
end
"""

# Push a job unless the queue already holds ARGV[2] jobs, at its place in the queue's order (_QUEUE_ORDER_LUA): check
# and push are one atomic step. Remainders count in LLEN like any waiting request, but their push (YIELD_LUA) is
# never refused: a client never gets 429 because its own job was split.
# KEYS[1]=queue  ARGV[1]=job json  ARGV[2]=max queued
PUSH_BOUNDED_LUA: Final = (
    _QUEUE_ORDER_LUA
    + """
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
place(KEYS[1], ARGV[1], false)
return 1
"""
)

# True when the job a worker would claim next should have the slot before the running job's next piece. A running
# batch job gives way to any fresh job: realtime, or a batch job that has not started (part 0). A running realtime
# segment gives way to another owner's fresh job, and to a realtime job of an earlier turn (the remainder of a
# segment that gave way before): one key's long segments never hold every worker while another key's first job
# waits, and a key's own later segments never interrupt its earlier ones. One LINDEX and a JSON decode of one job.
# KEYS[1]=queue  ARGV[1]=the running job's priority ("batch" when absent)  ARGV[2]=its owner  ARGV[3]=its turn
SHOULD_YIELD_LUA: Final = """
local raw = redis.call('LINDEX', KEYS[1], -1)
if not raw then return 0 end
local ok, job = pcall(cjson.decode, raw)
if not ok or type(job) ~= 'table' then return 0 end
local fresh = (tonumber(job.part) or 0) == 0
if ARGV[1] == 'realtime' then
  if fresh and job.owner ~= (ARGV[2] or '') then return 1 end
  if job.priority == 'realtime' and (tonumber(job.turn) or 0) < (tonumber(ARGV[3]) or 0) then return 1 end
  return 0
end
if job.priority == 'realtime' or fresh then return 1 end
return 0
"""

# Give up the slot, atomically: drop the running job from the worker's in-flight list, push its remainder, and claim
# the next job (the right end) into the in-flight list; return that job's JSON. A batch remainder goes to the far
# (left) end. A realtime remainder (ARGV[3] "realtime") is placed once the next job is claimed, by its turn and ahead
# of its owner's later jobs (_QUEUE_ORDER_LUA): it continues at its owner's next turn, never behind its own later
# segments. A reaper therefore finds the job in exactly one place at every moment: nothing is lost or run twice.
# KEYS[1]=queue  KEYS[2]=in-flight list  ARGV[1]=the running job's JSON as claimed  ARGV[2]=the remainder's JSON
# ARGV[3]="realtime" for a realtime remainder
YIELD_LUA: Final = (
    _QUEUE_ORDER_LUA
    + """
redis.call('LREM', KEYS[2], 1, ARGV[1])
if ARGV[3] == 'realtime' then
  local claimed = redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
  place(KEYS[1], ARGV[2], true)
  return claimed
end
redis.call('LPUSH', KEYS[1], ARGV[2])
return redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
"""
)

# Claim the next job (the right end) into a worker's in-flight list only when its owner is none of ARGV: a worker whose
# deadline schedule is full still takes a key's first stream on it, so one key's many streams never keep another key's
# turn out of every worker (docs/scheduling.md). The owner is read from the job's first bytes (Job.to_json writes it
# first); only a job written otherwise is decoded. Returns the job's JSON, or nil when the queue is empty or its next
# job's owner has a stream on this worker.
# KEYS[1]=queue  KEYS[2]=in-flight list  ARGV=the owners of the streams the worker holds
CLAIM_NEW_OWNER_LUA: Final = """
local raw = redis.call('LINDEX', KEYS[1], -1)
if not raw then return false end
local owner = string.match(raw, '^{"owner":"([^"]*)"')
if not owner then
  local ok, job = pcall(cjson.decode, raw)
  owner = ''
  if ok and type(job) == 'table' and type(job.owner) == 'string' then owner = job.owner end
end
for i = 1, #ARGV do
  if ARGV[i] == owner then return false end
end
return redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
"""

# Recover a dead worker's in-flight list, atomically, only while its heartbeat is gone. A job whose audio had not
# started and that did not exceed a memory ceiling goes back to the head of the queue once (its id is returned second,
# for the log); any other job is returned first (its JSON) to the caller, who fails it.
# KEYS[1]=processing list  KEYS[2]=heartbeat key  KEYS[3]=queue  KEYS[4]=workers set
# ARGV[1]=job key prefix  ARGV[2]=started field  ARGV[3]=max attempts  ARGV[4]=worker id  ARGV[5]=memory field
# ARGV[6]=owner field (cleared on a job put back, so that the next worker to claim it owns it)
REAP_LUA: Final = """
if redis.call('EXISTS', KEYS[2]) == 1 then return {{}, {}} end
local failed = {}
local requeued = {}
while true do
  local raw = redis.call('RPOP', KEYS[1])
  if not raw then break end
  local ok, job = pcall(cjson.decode, raw)
  if ok and type(job) == 'table' and job.job_id then
    local started = redis.call('HEXISTS', ARGV[1] .. job.job_id, ARGV[2])
    local poison = redis.call('HEXISTS', ARGV[1] .. job.job_id, ARGV[5])
    local attempts = tonumber(job.attempts) or 0
    if started == 0 and poison == 0 and attempts + 1 < tonumber(ARGV[3]) then
      job.attempts = attempts + 1
      redis.call('HDEL', ARGV[1] .. job.job_id, ARGV[6])
      redis.call('RPUSH', KEYS[3], cjson.encode(job))
      table.insert(requeued, job.job_id)
    else
      table.insert(failed, raw)
    end
  end
end
redis.call('SREM', KEYS[4], ARGV[4])
return {failed, requeued}
"""


# The Job fields to_json writes first, in this order, for PUSH_BOUNDED_LUA.
QUEUE_LEAD_FIELDS: Final = ("owner", "priority", "part", "turn")


def new_job_id() -> str:
    """A fresh, unguessable job id."""
    return uuid.uuid4().hex


@dataclass(slots=True)
class Job:
    """One unit of synthesis: a text spoken with one voice into one output format."""

    text: str
    voice_id: str
    output_format: str
    job_id: str = field(default_factory=new_job_id)
    voice_settings: dict[str, Any] = field(default_factory=dict)
    priority: Priority = "batch"
    request_id: str = ""
    # Character timing per chunk (for with-timestamps routes and the realtime socket).
    alignment: bool = False
    seed: int | None = None
    created_at: float = field(default_factory=time.time)
    # Unix time after which a job still waiting in the queue is dropped unrun.
    start_deadline: float = 0.0
    # How many times a dead worker's job was handed to another worker (at most MAX_ATTEMPTS - 1).
    attempts: int = 0
    # Where the worker publishes this job's events: the reply channel of the front that submits it (set by submit).
    reply_to: str = ""
    # A remainder (a job that yielded its slot after ``part`` pieces) continues where it stopped: its first chunk
    # carries sequence number ``seq`` and starts ``sample_offset`` engine samples into the job's audio.
    part: int = 0
    seq: int = 0
    sample_offset: int = 0
    # Characters of the whole request (the remainder's text is only what is left to speak); 0 means len(text).
    total_chars: int = 0
    # Unix time the job (or this remainder) was queued; 0 means created_at. Gives the slot-wait figure.
    queued_at: float = 0.0
    # Whose turn the job takes in the queue (PUSH_BOUNDED_LUA): the short, non-secret fingerprint of the key the
    # request counts against (a token's minting key); "" for an open server. Not the job hash's OWNER_FIELD (a worker).
    owner: str = ""
    # The owner's unfinished jobs on the front that pushed this one (queued or running, this one not counted): the
    # least round this job takes in the queue, so a key whose jobs hold the workers waits behind other keys' turns.
    turn: int = 0
    # Flow control (credit_key): ``window`` > 0 paces the job (0: a front that predates flow control); the worker
    # may publish up to ``granted_bytes`` of encoded audio, and always one more chunk once all it sent was taken
    # (``consumed_bytes``). A remainder carries what earlier parts published (``sent_bytes``) and the last grant read.
    window: int = 0
    sent_bytes: int = 0
    consumed_bytes: int = 0
    granted_bytes: int = 0
    # The W3C trace context (traceparent) of the front's span that queued the job, when traces are on (tracing.py).
    trace: dict[str, str] = field(default_factory=dict)
    # The job whose audio this one's plays right after (a socket context's previous segment, unfinished when this one
    # was pushed), or "": a worker holding both computes this one once that one is made, and times its deadlines
    # from where that one's playback ends (docs/scheduling.md).
    follows: str = ""

    def to_json(self) -> str:
        """Serialise for the queue, the fields PUSH_BOUNDED_LUA reads first (QUEUE_LEAD_FIELDS)."""
        data = asdict(self)
        # The push script reads these from a job's first bytes, never decoding a whole (maybe 10,000-character) job.
        lead = {name: data.pop(name) for name in QUEUE_LEAD_FIELDS}
        return json.dumps({**lead, **data}, separators=(",", ":"), ensure_ascii=False)

    @property
    def resumed(self) -> bool:
        """True for the remainder of a job that yielded its slot (its audio may have started)."""
        return self.part > 0

    @classmethod
    def from_json(cls, raw: str | bytes) -> Job:
        """Parse a queued job; unknown fields (from a newer front) are ignored."""
        data = json.loads(raw)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass(slots=True)
class Event:
    """One message on a job's events channel.

    ``meta`` carries small JSON fields (alignment, sample counts, error code and message); ``audio`` carries the
    encoded audio bytes of a chunk, sent raw after the JSON header so no base64 is paid on the hot path.
    """

    kind: EventKind
    seq: int
    meta: dict[str, Any] = field(default_factory=dict)
    audio: bytes = b""
    job_id: str = ""

    def encode(self) -> bytes:
        """Wire form: compact JSON header (kind, sequence, job id, meta), a newline, then the raw audio bytes."""
        header = json.dumps(
            {"k": self.kind, "s": self.seq, "j": self.job_id, **self.meta}, separators=(",", ":"), ensure_ascii=False
        )
        return header.encode() + b"\n" + self.audio

    @classmethod
    def decode(cls, raw: bytes) -> Event:
        """Inverse of :meth:`encode`."""
        header, _, audio = raw.partition(b"\n")
        meta = json.loads(header)
        kind = meta.pop("k")
        seq = meta.pop("s")
        job_id = meta.pop("j", "")
        return cls(kind=kind, seq=seq, meta=meta, audio=audio, job_id=job_id)

    @property
    def terminal(self) -> bool:
        """True for the one event that ends a job."""
        return self.kind != "chunk"


def error_event(seq: int, code: ErrorCode, message: str) -> Event:
    """A terminal error with a machine code and a human message."""
    return Event("error", seq, {"code": code.value, "message": message})
