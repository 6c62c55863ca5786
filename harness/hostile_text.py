"""Hostile text for the fuzz suite (tests/test_hostile_fuzz.py) and its release-length run (``fuzz-hostile``).

Hypothesis strategies for what a stranger with a browser token may send as text, and :class:`HostileRun`, which
sends one example through a real front to a real worker and checks what matters: a 2xx or 4xx (never a 5xx), a
bounded time to the answer, a front that keeps answering ``/healthz`` meanwhile, and a worker that stays alive
with bounded memory.
"""

from __future__ import annotations

import logging
import string
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import strategies as st

# httpx logs every request at INFO: the health probe alone would drown a failing test's log.
logging.getLogger("httpx").setLevel(logging.WARNING)

# ----- strategies --------------------------------------------------------------------------------------------------

_NO_SPACE = st.characters(exclude_categories=["Zs", "Zl", "Zp", "Cs"], exclude_characters="\t\n\r\x0b\x0c")
_RTL = st.characters(min_codepoint=0x0590, max_codepoint=0x08FF)  # Hebrew, Arabic, Syriac, Thaana, NKo ...
_EMOJI = st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF)
_COMBINING = st.characters(categories=["Mn", "Mc", "Me"])
_CONTROL = st.characters(categories=["Cc", "Cf"])
_ANY = st.characters(exclude_categories=["Cs"])  # every category JSON can carry (no lone surrogates)
_BIDI_AND_JOINERS = st.sampled_from(["\u200d", "\u200e", "\u200f", "\u202a", "\u202e", "\u2066", "\u2069", "\ufe0f"])
_TAG_WORDS = st.sampled_from(
    [
        '<break time="3s" />',
        '<break time="1500ms"/>',
        "<break time='9999s'/>",
        "<break",
        "<phoneme alphabet='ipa' ph='x'>a</phoneme>",
        "<speak>",
        "</speak>",
        "[[ h ə l oʊ ]]",
        "[[",
        "]]",
        "<<<>>>",
        "&amp;",
        "&#0;",
        "<!DOCTYPE x>",
        "<![CDATA[",
        "\ue000b3000\ue001",
        "\ue000pcHH AH0\ue001",
    ]
)


def long_words(max_size: int) -> st.SearchStrategy[str]:
    """One run without white space: letters, digits and ordinals glued together, or anything at all."""
    glued = st.lists(st.sampled_from(["1st", "2nd", "3rd", "4th", "abc", "XYZ", "999", "é", "ß"]), max_size=max_size)
    return st.one_of(
        glued.map("".join),
        st.text(_NO_SPACE, min_size=1, max_size=max_size),
        st.integers(1, max_size).map(lambda n: "a" * n),
    )


def digit_runs(max_size: int) -> st.SearchStrategy[str]:
    """Digits and the punctuation numbers are written with: commas, points, signs, currency, percent."""
    return st.text(st.sampled_from(string.digits + ",.-+$€£%#:/ "), min_size=1, max_size=max_size)


def mixed(max_size: int) -> st.SearchStrategy[str]:
    """Ordinary words interleaved with every hostile kind of run."""
    piece = st.one_of(
        st.sampled_from(["Hello", "world.", "The", "price", "is", "on", "Dr.", "St.", "etc.", "e.g."]),
        long_words(max(1, max_size // 4)),
        digit_runs(max(1, max_size // 4)),
        st.text(_RTL, min_size=1, max_size=20),
        st.text(_EMOJI | _BIDI_AND_JOINERS, min_size=1, max_size=20),
        st.text(_COMBINING, min_size=1, max_size=40),
        st.text(_CONTROL, min_size=1, max_size=10),
        st.text(st.sampled_from(string.punctuation), min_size=1, max_size=60),
        _TAG_WORDS,
        st.text(_ANY, min_size=1, max_size=30),
    )
    return (
        st.lists(piece, min_size=1, max_size=40)
        .flatmap(lambda parts: st.sampled_from([" ", "", "\n", "  \t"]).map(lambda sep: sep.join(parts)))
        .map(lambda text: text[:max_size])
    )


def hostile_text(max_size: int) -> st.SearchStrategy[str]:
    """Any of the hostile kinds, at most ``max_size`` characters."""
    return st.one_of(
        long_words(max_size),
        digit_runs(max_size),
        st.text(_ANY, min_size=1, max_size=max_size),
        st.text(_COMBINING | _RTL | _EMOJI | _CONTROL | _BIDI_AND_JOINERS, min_size=1, max_size=max_size),
        mixed(max_size),
    )


@dataclass(frozen=True)
class HostileRequest:
    """One fuzz example: the text and how it is sent."""

    text: str
    route: str  # "stream", "convert", "with-timestamps" or "openai"
    normalization: str  # "auto", "on" or "off"
    dictionaries: tuple[int, ...] = ()  # which of the run's dictionaries it names (HostileRun.upload_dictionaries)

    def describe(self) -> str:
        """A short, printable description for failure messages."""
        named = f" dictionaries={list(self.dictionaries)}" if self.dictionaries else ""
        return f"{self.route} norm={self.normalization}{named} {len(self.text)} chars {self.text[:80]!r}"


def hostile_requests(max_size: int) -> st.SearchStrategy[HostileRequest]:
    """A hostile text on any of the HTTP synthesis routes, with any normalization mode, naming up to three of the
    run's dictionaries (:data:`DICTIONARIES`) one time in three."""
    return st.builds(
        HostileRequest,
        text=hostile_text(max_size),
        route=st.sampled_from(["stream", "convert", "with-timestamps", "openai"]),
        normalization=st.sampled_from(["auto", "on", "off"]),
        dictionaries=st.one_of(
            st.just(()), st.just(()), st.lists(st.integers(0, len(DICTIONARIES) - 1), max_size=3).map(tuple)
        ),
    )


def _hostile_rules() -> list[dict[str, Any]]:
    """Rules over the strings the strategies make: overlapping, of every flag, aliases and phonemes."""
    strings = ["Hello", "hello world", "world.", "1st", "1st2nd", "9", "99", "999", "é", "ß", "abc", "XYZ", "$1"]
    strings += ["Dr.", "<break", "[[", "]]", "&amp;", "a", "aa", "the", "The price", "-", "%", "e.g."]
    rules: list[dict[str, Any]] = []
    for n, word in enumerate(strings):
        flags = {"case_sensitive": n % 2 == 0, "word_boundaries": n % 3 != 0}
        if n % 4 == 3:
            rules.append({"type": "phoneme", "string_to_replace": word, "phoneme": "h ə l oʊ", "alphabet": "ipa"})
        else:
            rules.append({"type": "alias", "string_to_replace": word, "alias": f"alias {n} " * (n % 3 + 1), **flags})
    return rules


#: The dictionaries a fuzz run uploads: the issue's 10,000 identical rules (F1, as PLS: over the JSON body limit),
#: and rules over what the strategies make (as JSON, with their flags).
DICTIONARIES: list[list[dict[str, Any]]] = [
    [{"type": "alias", "string_to_replace": "x", "alias": "y"}] * 10_000,
    _hostile_rules(),
]


def _pls(rules: list[dict[str, Any]]) -> bytes:
    from xml.sax.saxutils import escape

    lexemes = []
    for rule in rules:
        said = (
            f"<alias>{escape(rule['alias'])}</alias>"
            if rule["type"] == "alias"
            else f"<phoneme>{rule['phoneme']}</phoneme>"
        )
        lexemes.append(f"<lexeme><grapheme>{escape(rule['string_to_replace'])}</grapheme>{said}</lexeme>")
    head = '<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa">'
    return (head + "".join(lexemes) + "</lexicon>").encode()


# ----- one example against a running stack -------------------------------------------------------------------------


class HealthProbe:
    """Polls ``/healthz`` every 50 ms in a thread and keeps the longest answer time seen since the last reset."""

    def __init__(self, base_url: str) -> None:
        self._client = httpx.Client(base_url=base_url, timeout=30.0)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.worst_s = 0.0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="healthz-probe", daemon=True)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(35)
        self._client.close()

    def take_worst(self) -> float:
        """The longest ``/healthz`` answer since the last call, in seconds (then reset)."""
        with self._lock:
            worst, self.worst_s = self.worst_s, 0.0
        return worst

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            start = time.perf_counter()
            try:
                ok = self._client.get("/healthz").status_code == 200
            except httpx.HTTPError:
                ok = False
            elapsed = time.perf_counter() - start
            with self._lock:
                self.worst_s = max(self.worst_s, elapsed)
                self.failures += 0 if ok else 1


@dataclass
class Outcome:
    """What one example got."""

    status: int
    seconds: float
    audio_bytes: int
    code: str | None = None
    notes: list[str] = field(default_factory=list)


class HostileRun:
    """Sends hostile examples to one front (open, or with ``key``) and checks each answer."""

    #: Wall time per example: the answer's status must come and at most this much audio is read, then the
    #: client hangs up (the job is cancelled, which the worker must honour within one bounded engine call).
    READ_S = 6.0

    def __init__(self, base_url: str, key: str = "fuzz-key") -> None:
        self.client = httpx.Client(base_url=base_url, timeout=httpx.Timeout(60.0), headers={"xi-api-key": key})
        self.dictionary_ids: list[str] = []

    def upload_dictionaries(self) -> None:
        """Upload :data:`DICTIONARIES` (requests name them by their place in that list)."""
        for number, rules in enumerate(DICTIONARIES):
            if len(rules) > 1000:
                files = {"file": ("lexicon.pls", _pls(rules), "application/pls+xml")}
                path, data = "/v1/pronunciation-dictionaries/add-from-file", {"name": f"fuzz {number}"}
                resp = self.client.post(path, data=data, files=files)
            else:
                body = {"name": f"fuzz {number}", "rules": rules}
                resp = self.client.post("/v1/pronunciation-dictionaries/add-from-rules", json=body)
            resp.raise_for_status()
            self.dictionary_ids.append(resp.json()["id"])

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()

    def send(self, request: HostileRequest) -> Outcome:
        """One example; returns its status, time to the end of reading, and how much audio came."""
        body: dict[str, Any]
        if request.route == "openai":
            path = "/v1/audio/speech"
            body = {"model": "tts-1", "voice": "alloy", "input": request.text, "response_format": "pcm"}
        else:
            suffix = {"convert": "", "stream": "/stream", "with-timestamps": "/stream/with-timestamps"}[request.route]
            path = f"/v1/text-to-speech/fuzz-voice{suffix}?output_format=pcm_16000"
            body = {"text": request.text, "apply_text_normalization": request.normalization}
        if request.dictionaries and self.dictionary_ids:
            named = [self.dictionary_ids[n % len(self.dictionary_ids)] for n in request.dictionaries]
            body["pronunciation_dictionary_locators"] = [{"pronunciation_dictionary_id": i} for i in named]
        start = time.perf_counter()
        received = 0
        with self.client.stream("POST", path, json=body) as resp:
            if resp.status_code >= 400:
                payload = resp.read()
                code = _error_code(payload)
                return Outcome(resp.status_code, time.perf_counter() - start, 0, code)
            for chunk in resp.iter_bytes():
                received += len(chunk)
                if time.perf_counter() - start > self.READ_S:
                    break  # hang up: the rest of a long text is cancelled
        return Outcome(resp.status_code, time.perf_counter() - start, received)

    def speak_check(self) -> bytes:
        """A normal sentence, spoken whole: its 16 kHz PCM (the worker still speaks)."""
        resp = self.client.post(
            "/v1/text-to-speech/fuzz-voice?output_format=pcm_16000", json={"text": "The worker is still here."}
        )
        resp.raise_for_status()
        return resp.content


def _error_code(payload: bytes) -> str | None:
    """The ``detail.code`` (ElevenLabs) or ``error.code`` (OpenAI) of an error body, if it has one."""
    import json

    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    detail = data.get("detail") or data.get("error")
    if isinstance(detail, dict):
        code = detail.get("code") or detail.get("type")
        return str(code) if code is not None else None
    return None
