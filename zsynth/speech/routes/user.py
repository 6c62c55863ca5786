"""Account stubs: ``GET /v1/user`` and ``GET /v1/user/subscription``, so clients that read them at start-up work.

Nothing is metered: the character count is always 0 and the limits are generous constants.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from zsynth.kit.endpoints import Access, Endpoints
from zsynth.services.auth import CREDENTIAL, workspace_of
from zsynth.services.voices import VOICES
from zsynth.speech.schemas.apidoc import json_body, optional

routes = Endpoints()


class Subscription(BaseModel):
    """A self-hosted stub: nothing is metered, the limits are generous constants."""

    model_config = ConfigDict(extra="allow")

    tier: str
    character_count: int
    character_limit: int
    can_extend_character_limit: bool = optional()
    allowed_to_extend_character_limit: bool = optional()
    next_character_count_reset_unix: int | None = None
    voice_slots_used: int = Field(ge=0)
    voice_limit: int
    professional_voice_limit: int = optional()
    can_use_instant_voice_cloning: bool = optional()
    can_use_professional_voice_cloning: bool = optional()
    currency: str | None = None
    status: str
    billing_period: str | None = None
    character_refresh_period: str | None = None


class User(BaseModel):
    """The account: a stub carrying the subscription."""

    model_config = ConfigDict(extra="allow")

    user_id: str
    workspace_id: str = optional()
    subscription: Subscription
    is_new_user: bool
    xi_api_key: None = Field(description="Never echoed.")
    is_api_key_hashed: bool = optional()
    first_name: str | None = None
    created_at: int
    seat_type: str = optional()


def subscription(voices_used: int) -> dict[str, Any]:
    """A subscription with every field SDK 2.78 and the OAS require."""
    return {
        "tier": "self_hosted",
        "character_count": 0,
        "character_limit": 1_000_000_000,
        "max_character_limit_extension": None,
        "max_credit_limit_extension": 0,
        "can_extend_character_limit": False,
        "allowed_to_extend_character_limit": False,
        "next_character_count_reset_unix": None,
        "voice_slots_used": voices_used,
        "professional_voice_slots_used": 0,
        "professional_voice_slots_used_in_workspace": 0,
        "voice_limit": 10_000,
        "max_voice_add_edits": None,
        "voice_add_edit_counter": 0,
        "professional_voice_limit": 0,
        "can_extend_voice_limit": False,
        "can_use_instant_voice_cloning": True,
        "can_use_professional_voice_cloning": False,
        "currency": "usd",
        "current_overage": {"amount": "0.00", "currency": "usd"},
        "status": "active",
        "billing_period": "monthly_period",
        "character_refresh_period": "monthly_period",
        "next_invoice": None,
        "pending_change": None,
        "open_invoices": [],
        "has_open_invoices": False,
    }


@routes.get(
    "/v1/user/subscription",
    access=Access.FULL,
    operationId="get_subscription",
    tags=["user"],
    summary="The subscription (a stub; voice_slots_used counts the clones).",
    responses={200: json_body("The subscription.", Subscription)},
)
async def get_subscription(request: web.Request) -> web.Response:
    """``GET /v1/user/subscription``."""
    return web.json_response(subscription(request.app[VOICES].clone_count(workspace_of(request.get(CREDENTIAL)))))


@routes.get(
    "/v1/user",
    access=Access.FULL,
    operationId="get_user",
    tags=["user"],
    summary="The account (a stub).",
    responses={200: json_body("The user.", User)},
)
async def get_user(request: web.Request) -> web.Response:
    """``GET /v1/user``: a stub account carrying the same subscription."""
    return web.json_response(
        {
            "user_id": "zsynth",
            "workspace_id": "zsynth",
            "subscription": subscription(request.app[VOICES].clone_count(workspace_of(request.get(CREDENTIAL)))),
            "subscription_extras": None,
            "is_new_user": False,
            "xi_api_key": None,
            "xi_api_key_preview": None,
            "is_api_key_hashed": True,
            "can_use_delayed_payment_methods": False,
            "is_onboarding_completed": True,
            "is_onboarding_checklist_completed": True,
            "show_compliance_terms": False,
            "first_name": None,
            "created_at": 0,
            "seat_type": "workspace_admin",
            "referral_link_code": None,
            "partnerstack_partner_default_link": None,
        }
    )
