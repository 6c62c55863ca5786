"""Errors as every server answers them: one exception, :class:`Refusal`, raised anywhere, and each server's error
envelope, defined once as a model (:class:`ErrorEnvelope`) that is both the OpenAPI schema and the body a client gets.

A server names its envelope once (its error middleware, :func:`zsynth.kit.middleware.error_middleware_for`); a route
whose errors take another shape declares it (``error_envelope`` on its :class:`zsynth.kit.endpoints.Endpoint`: the
OpenAI route). Nothing chooses an envelope by path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Self

import pydantic
from aiohttp import web

from zsynth.core.codes import CodedError


class Refusal(CodedError):
    """An error answered with ``http_status``: ``code`` and ``message`` reach the client in the envelope of the
    route (``param``: the request field at fault, where the envelope has room for it)."""

    def __init__(
        self,
        http_status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(code, message)
        self.http_status = http_status
        self.param = param
        self.headers = dict(headers or {})


class ErrorEnvelope(pydantic.BaseModel):
    """An error envelope: the model is the documented schema, :meth:`of` the answer a client gets."""

    @classmethod
    def of(cls, error: Refusal, request_id: str) -> Self:
        """The envelope of ``error`` for the request ``request_id``; only the fields set here are sent."""
        raise NotImplementedError

    def response(self, error: Refusal, request_id: str) -> web.Response:
        """This envelope as the JSON answer to ``error``, with its headers and ``request-id``."""
        return web.json_response(
            self.model_dump(mode="json", exclude_unset=True),
            status=error.http_status,
            headers={**error.headers, "request-id": request_id},
            dumps=lambda obj: json.dumps(obj, ensure_ascii=False),
        )


def render(envelope: type[ErrorEnvelope], error: Refusal, request_id: str) -> web.Response:
    """``error`` answered in ``envelope``."""
    return envelope.of(error, request_id).response(error, request_id)
