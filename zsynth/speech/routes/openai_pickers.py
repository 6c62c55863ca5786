"""The pickers of OpenAI-compatible UIs: ``GET /v1/audio/voices`` and ``GET /v1/audio/models``.

Open WebUI's OpenAI engine fills its voice and model pickers from these two routes, in Kokoro-FastAPI's shape
(``{"voices": [{"id", "name"}]}``, ``{"models": [{"id", "name"}]}``), and asks without an Authorization header; on
any failure it silently shows OpenAI's six voice names. So both routes are public: without a credential the voice
list holds the built-in voices and the ``ZSYNTH_OPENAI_VOICES`` names; with a key or token (or on a server without
keys) it holds the cloned voices too, every one of which that credential may speak. A credential that is presented
and refused gets 401, as anywhere else. Every id listed works as ``voice`` on ``POST /v1/audio/speech``, and every
model id as ``model``.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web
from pydantic import BaseModel

from zsynth.core import workspaces
from zsynth.core.engines import profile
from zsynth.kit.endpoints import Access, Endpoints
from zsynth.kit.envelope import Refusal
from zsynth.kit.gate import admit
from zsynth.services.auth import AUTHENTICATOR, AuthError, read_credential
from zsynth.services.keys import SETTINGS
from zsynth.services.voices import VOICES
from zsynth.speech.access import HTTP_GATE
from zsynth.speech.schemas.apidoc import OpenAIError, json_body

routes = Endpoints()

#: OpenAI's model names: the speech route serves each with this deployment's engine.
OPENAI_MODELS: Final = (("tts-1", "tts-1"), ("tts-1-hd", "tts-1-hd"), ("gpt-4o-mini-tts", "gpt-4o-mini-tts"))


class Choice(BaseModel):
    """One entry of a picker: the id to send, and the label to show."""

    id: str
    name: str


class VoiceChoices(BaseModel):
    """The voice picker's list."""

    voices: list[Choice]


class ModelChoices(BaseModel):
    """The model picker's list."""

    models: list[Choice]


async def _sees_clones(request: web.Request) -> str | None:
    """The workspace whose cloned voices the caller may list (None: none): any accepted credential's, or on a server
    without keys the default one. A credential presented and refused is answered 401 in OpenAI's envelope, never
    silently treated as none."""
    presented = read_credential(request)
    if presented.secret is None:
        return workspaces.DEFAULT if request.app[AUTHENTICATOR].is_open else None
    try:
        credential = await admit(request, HTTP_GATE, Access.TOKEN, presented)
    except AuthError as err:
        headers = {"WWW-Authenticate": "Bearer"} if err.http_status == 401 else {"Retry-After": "1"}
        raise Refusal(err.http_status, err.code, err.message, headers=headers) from err
    return credential.workspace


@routes.get(
    "/v1/audio/voices",
    access=Access.PUBLIC,
    operationId="openai_list_voices",
    tags=["openai"],
    summary="The voice picker of OpenAI-compatible UIs (Open WebUI): built-in voices, and with a key the clones.",
    responses={
        200: json_body("Every voice the caller may speak; each id works as voice on /v1/audio/speech.", VoiceChoices)
    },
    errors=(401, 429, 503),
    error_envelope=OpenAIError,
)
async def list_voices(request: web.Request) -> web.Response:
    """The voices the caller may speak, built-in first, then the OpenAI names, then (with a credential) the clones."""
    catalog = request.app[VOICES]
    workspace = await _sees_clones(request)
    voices: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for voice in catalog.all(workspace or workspaces.DEFAULT):
        if voice["category"] == "premade" or workspace is not None:
            names[voice["voice_id"]] = voice["name"]
            voices.append({"id": voice["voice_id"], "name": voice["name"]})
    builtin_count = len(catalog.builtins)
    aliases = [
        {"id": alias, "name": f"{alias} ({names[target]})"}
        for alias, target in request.app[SETTINGS].voices.openai
        if target in names and alias not in names
    ]
    return web.json_response({"voices": voices[:builtin_count] + aliases + voices[builtin_count:]})


@routes.get(
    "/v1/audio/models",
    access=Access.PUBLIC,
    operationId="openai_list_models",
    tags=["openai"],
    summary="The model picker of OpenAI-compatible UIs (Open WebUI).",
    responses={
        200: json_body("Model ids the speech route accepts; all are served by this deployment's engine.", ModelChoices)
    },
    error_envelope=OpenAIError,
)
async def list_models(request: web.Request) -> web.Response:
    """This deployment's engine first, then OpenAI's model names (each spoken by the same engine)."""
    engine = request.app[SETTINGS].engine
    card = profile(engine).model
    models = [{"id": card.model_id, "name": card.name}]
    models += [{"id": model_id, "name": name} for model_id, name in OPENAI_MODELS]
    return web.json_response({"models": models})
