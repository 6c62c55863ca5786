"""Schemathesis against the OpenAPI document, every operation, on a real front process with the shared workers.

Bounded for a 2-core box: a few examples per operation, short texts (ZSYNTH_MAX_TEXT_CHARS of the fuzzed front).
Checks: no 5xx, and status codes, media types, headers and JSON bodies conform to the document.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import CheckFunction
from schemathesis.specs.openapi.checks import positive_data_acceptance, response_schema_conformance

from harness.fronts import front_process
from zsynth.core.config import Settings
from zsynth.documents import build_document

from .openapi_helpers import JSON_LINES  # one JSON object per line: their per-line schema check lives there

# alone: schemathesis gives every operation's test the same node id (tests/test_fuzz.py::test_fuzz), and pytest-xdist
# tells tests apart by node id, so in a parallel pass only one of them would run: ./scripts/test runs these in its
# one-process pass.
pytestmark = [pytest.mark.heavy, pytest.mark.alone]

KEY = "fuzz-key-0123456789"
# Examples per operation: 20 operations, so the run stays around a minute on two busy cores.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "12"))

MAX_TEXT = 80  # long enough for every route's shapes; each example's synthesis stays short
schema = schemathesis.openapi.from_dict(build_document("speech", Settings().with_(limits_max_text_chars=MAX_TEXT)))
# Operations whose inputs have a validity the schema cannot state: a clip must be real speech, a page token must
# come from an earlier page. Schema-valid requests may get a 4xx there; every other check still runs.
# So must a PLS file, and a dictionary id (or version id) must name one that exists.
SEMANTIC_INPUTS = {
    ("POST", "/voices"),
    ("POST", "/v1/voices/add"),
    ("GET", "/v2/voices"),
    ("POST", "/v1/pronunciation-dictionaries/add-from-file"),
    ("GET", "/v1/pronunciation-dictionaries"),
    ("GET", "/v1/pronunciation-dictionaries/{dictionary_id}"),
    ("PATCH", "/v1/pronunciation-dictionaries/{dictionary_id}"),
    ("DELETE", "/v1/pronunciation-dictionaries/{dictionary_id}"),
    ("POST", "/v1/pronunciation-dictionaries/{dictionary_id}/add-rules"),
    ("POST", "/v1/pronunciation-dictionaries/{dictionary_id}/set-rules"),
    ("POST", "/v1/pronunciation-dictionaries/{dictionary_id}/remove-rules"),
    ("GET", "/v1/pronunciation-dictionaries/{dictionary_id}/{version_id}/download"),
    # A dialogue may use at most 10 distinct voices, and its inputs' texts together are bounded like one text.
    ("POST", "/v1/text-to-dialogue"),
    ("POST", "/v1/text-to-dialogue/stream"),
    ("POST", "/v1/text-to-dialogue/with-timestamps"),
    ("POST", "/v1/text-to-dialogue/stream/with-timestamps"),
    # ElevenLabs names more single-use token types than tts_websocket, the one zsynth serves (the others: 400).
    ("POST", "/v1/single-use-token/{token_type}"),
}


def names_dictionaries(case) -> bool:
    """A synthesis request naming dictionaries: random ids name none, so a 404 is the right answer."""
    return isinstance(case.body, dict) and bool(case.body.get("pronunciation_dictionary_locators"))


@pytest.fixture(scope="module")
def fuzz_front(redis_url: str, data_dir: Path, shared_workers, keys_table: str) -> Iterator[str]:
    """One front with a key and the keys table (so tokens mint) for the whole run; short texts keep it quick."""
    env = {
        "ZSYNTH_API_KEY": KEY,
        "ZSYNTH_API_KEYS_TABLE": keys_table,
        "ZSYNTH_MAX_TEXT_CHARS": str(MAX_TEXT),
        "ZSYNTH_LOG_LEVEL": "WARNING",
    }
    with front_process(redis_url, data_dir, **env) as (_, base):
        yield base


@pytest.mark.timeout(300)
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_fuzz(case, fuzz_front):
    operation = (case.method.upper(), case.path)
    excluded: list[CheckFunction] = (
        [positive_data_acceptance] if operation in SEMANTIC_INPUTS or names_dictionaries(case) else []
    )
    if operation in JSON_LINES:
        excluded.append(response_schema_conformance)
    case.call_and_validate(base_url=fuzz_front, headers={"xi-api-key": KEY}, timeout=60, excluded_checks=excluded)
