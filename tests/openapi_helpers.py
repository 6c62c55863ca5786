"""Checks of real answers against an OpenAPI document, shared by the speech and avatar document tests."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from jsonschema import Draft202012Validator

from zsynth.documents import build_document
from zsynth.speech.ws import REALTIME_SUFFIXES

DOC = build_document("speech")
METHODS = ("get", "put", "post", "delete", "patch")
# OpenAPI does not model WebSockets: the realtime routes stay out of the document.
WEBSOCKET_SUFFIXES = REALTIME_SUFFIXES
# Answers of these operations are one JSON object per line (sent as application/json, as ElevenLabs does).
JSON_LINES = {
    ("POST", "/v1/text-to-speech/{voice_id}/stream/with-timestamps"),
    ("POST", "/v1/text-to-dialogue/stream/with-timestamps"),
}


def documented(doc: dict[str, Any] = DOC) -> set[tuple[str, str]]:
    """(METHOD, path template) of every documented operation."""
    return {(method.upper(), path) for path, item in doc["paths"].items() for method in item if method in METHODS}


def registered(app, websocket_suffixes: tuple[str, ...] = WEBSOCKET_SUFFIXES) -> set[tuple[str, str]]:
    """(METHOD, path template) of every HTTP route the app registers (no HEAD/OPTIONS, no WebSockets)."""
    routes = set()
    for route in app.router.routes():
        resource = route.resource
        if resource is None or route.method in ("HEAD", "OPTIONS"):
            continue
        if route.method == "GET" and resource.canonical.endswith(websocket_suffixes):
            continue
        routes.add((route.method, resource.canonical))
    return routes


def json_validator(schema: dict[str, Any], doc: dict[str, Any] = DOC) -> Draft202012Validator:
    """A validator of ``schema`` whose ``#/components/...`` references resolve against the document."""
    return Draft202012Validator({"allOf": [schema], "components": doc["components"]})


class Checker:
    """Checks real answers against a document and records which operations were exercised."""

    def __init__(self, doc: dict[str, Any] = DOC) -> None:
        self.doc = doc
        self.seen: set[tuple[str, str]] = set()

    def validate(self, body: Any, schema: dict[str, Any], what: str) -> None:
        """``body`` matches ``schema``."""
        errors = sorted(json_validator(schema, self.doc).iter_errors(body), key=str)
        assert not errors, f"{what}: {[e.message for e in errors[:5]]}"

    async def check(self, resp: aiohttp.ClientResponse, method: str, template: str) -> Any:
        """Status documented, media type documented, JSON body valid; returns the parsed body (or bytes)."""
        op = self.doc["paths"][template][method.lower()]
        status = str(resp.status)
        assert status in op["responses"], f"{method} {template}: undocumented status {status}: {await resp.text()}"
        documented_types = op["responses"][status].get("content", {})
        assert resp.content_type in documented_types, f"{method} {template} {status}: {resp.content_type}"
        self.seen.add((method.upper(), template))
        if resp.content_type != "application/json":
            body = await resp.read()
            assert body, f"{method} {template}: empty {resp.content_type} body"
            return body
        schema = documented_types["application/json"]["schema"]
        if resp.status == 200 and (method.upper(), template) in JSON_LINES:
            text = await resp.text()
            assert text.endswith("\n"), f"{method} {template}: the last line is not terminated"
            lines = [json.loads(line) for line in text.splitlines()]
            for i, line in enumerate(lines):
                self.validate(line, schema, f"{method} {template} line {i}")
            return lines
        body = await resp.json()
        self.validate(body, schema, f"{method} {template} {status}")
        if resp.status >= 400:
            # Both servers echo the request id as a header; the speech API's envelope carries it too.
            assert resp.headers["request-id"]
            if "detail" in body:
                assert body["detail"]["request_id"] == resp.headers["request-id"]
        return body

    async def call(self, client, method: str, template: str, *, query: str = "", **kwargs: Any) -> Any:
        """Call ``template`` with its path parameters filled from ``kwargs``; check and return the body."""
        params = {k: kwargs.pop(k) for k in list(kwargs) if "{" + k + "}" in template}
        url = template.format(**params) + query
        async with client.request(method, url, **kwargs) as resp:
            return resp.status, await self.check(resp, method, template)
