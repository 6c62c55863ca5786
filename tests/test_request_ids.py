"""Request ids from outside: a proxy's X-Request-ID becomes the request's id (answer header, error envelope, logs),
a traceparent's trace id comes back as x-trace-id; anything unusable is ignored and an id is minted."""

from __future__ import annotations

import logging
import re

import pytest

from harness.audio import assert_speech, decode_audio

pytestmark = pytest.mark.stack

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
MINTED = re.compile(r"[0-9a-f]{32}")


async def test_a_streamed_answer_carries_the_callers_request_id_and_trace_id_and_the_logs_name_it(client, caplog):
    given = "lb-7f3a:9c21/req=42"
    caplog.set_level(logging.INFO)
    resp = await client.post(
        "/v1/text-to-speech/any-voice/stream?output_format=pcm_16000",
        json={"text": "Follow me from the load balancer."},
        headers={"X-Request-ID": given, "traceparent": TRACEPARENT},
    )
    assert resp.status == 200
    assert resp.headers["request-id"] == given
    assert resp.headers["x-trace-id"] == TRACE_ID
    samples, rate = decode_audio(await resp.read(), "pcm_16000")
    assert_speech(samples, rate, "Follow me from the load balancer.")
    assert any(given in record.getMessage() for record in caplog.records), "no log line names the request id"


async def test_an_error_envelope_names_the_callers_request_id(client):
    resp = await client.post("/v1/text-to-speech/any-voice", data=b"{not json", headers={"X-Request-ID": "edge-123"})
    assert resp.status == 400
    assert resp.headers["request-id"] == "edge-123" and resp.headers["x-trace-id"] == "edge-123"
    assert (await resp.json())["detail"]["request_id"] == "edge-123"


@pytest.mark.parametrize(
    "given",
    ["", "has space", "x" * 129, "tab\there", "naïve"],
)
async def test_an_unusable_request_id_is_ignored_and_one_is_minted(client, given):
    resp = await client.get("/v1/models", headers={"X-Request-ID": given, "traceparent": "00-zz-yy-01"})
    assert resp.status == 200
    assert MINTED.fullmatch(resp.headers["request-id"]), resp.headers["request-id"]
    assert resp.headers["x-trace-id"] == resp.headers["request-id"]


@pytest.mark.parametrize(
    "traceparent",
    [
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # an all-zero trace id is invalid
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # so is an all-zero parent
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff is forbidden
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case is not the format
    ],
)
async def test_an_invalid_traceparent_is_not_taken(client, traceparent):
    resp = await client.get("/v1/models", headers={"X-Request-ID": "mine-1", "traceparent": traceparent})
    assert resp.headers["request-id"] == "mine-1" and resp.headers["x-trace-id"] == "mine-1"


async def test_without_headers_the_ids_are_minted_as_before(client):
    first = await client.get("/v1/models")
    second = await client.get("/v1/models")
    ids = {first.headers["request-id"], second.headers["request-id"]}
    assert len(ids) == 2 and all(MINTED.fullmatch(i) for i in ids)
