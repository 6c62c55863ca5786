"""``GET /v1/models``: a bare JSON array with the one engine this deployment runs (any model_id still resolves)."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel

from zsynth.core.engines import profile
from zsynth.kit.endpoints import Access, Endpoints
from zsynth.services.keys import SETTINGS
from zsynth.speech.schemas.apidoc import json_body, optional

routes = Endpoints()


class Language(BaseModel):
    """A language a model speaks."""

    language_id: str
    name: str


class Model(BaseModel):
    """The ElevenLabs model entry; every model_id in a request is served by this engine."""

    model_id: str
    name: str
    can_be_finetuned: bool = optional()
    can_do_text_to_speech: bool
    can_do_voice_conversion: bool = optional()
    can_use_style: bool = optional()
    can_use_speaker_boost: bool = optional()
    serves_pro_voices: bool = optional()
    token_cost_factor: float
    description: str
    requires_alpha_access: bool = optional()
    max_characters_request_free_user: int = optional()
    max_characters_request_subscribed_user: int = optional()
    maximum_text_length_per_request: int
    languages: list[Language]
    model_rates: dict[str, Any] = optional()
    concurrency_group: str = optional()


def model_entry(engine: str, max_text_chars: int) -> dict[str, Any]:
    """The ElevenLabs ``ModelResponseModel`` of ``engine`` (its profile's model card), with every field the OAS
    requires."""
    card = profile(engine).model
    model_id, name, description, group = card.model_id, card.name, card.description, card.concurrency_group
    return {
        "model_id": model_id,
        "name": name,
        "can_be_finetuned": False,
        "can_do_text_to_speech": True,
        "can_do_voice_conversion": False,
        "can_use_style": False,
        "can_use_speaker_boost": False,
        "serves_pro_voices": False,
        "token_cost_factor": 1.0,
        "description": description + " Requests naming any model_id are served by this engine.",
        "requires_alpha_access": False,
        "max_characters_request_free_user": max_text_chars,
        "max_characters_request_subscribed_user": max_text_chars,
        "maximum_text_length_per_request": max_text_chars,
        "languages": [{"language_id": code, "name": language} for code, language in card.languages],
        "model_rates": {"character_cost_multiplier": 1.0},
        "concurrency_group": group,
    }


@routes.get(
    "/v1/models",
    access=Access.FULL,
    operationId="list_models",
    tags=["models"],
    summary="List the models.",
    responses={200: json_body("A bare array (an object here breaks the SDK).", {"type": "array", "items": Model})},
)
async def list_models(request: web.Request) -> web.Response:
    """The model list: one entry, a bare array (an object here breaks the SDK)."""
    settings = request.app[SETTINGS]
    return web.json_response([model_entry(settings.engine, settings.limits.max_text_chars)])
