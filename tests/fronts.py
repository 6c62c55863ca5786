"""Speech fronts the tests build in process, beyond the plain one of the ``client`` fixture."""

from __future__ import annotations

from aiohttp import web

from zsynth.core.config import Settings
from zsynth.services.auth import AUTHENTICATOR, Authenticator
from zsynth.speech.app import create_app

from .helpers import FakeClock


def clocked_app(settings: Settings) -> web.Application:
    """The speech front whose authenticator runs on a FakeClock (``app[AUTHENTICATOR].clock``) the test moves."""
    app = create_app(settings)
    app[AUTHENTICATOR] = Authenticator.from_settings(settings, clock=FakeClock())
    return app
