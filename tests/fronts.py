"""Speech fronts the tests build in process, beyond the plain one of the ``client`` fixture."""

from __future__ import annotations

from aiohttp import web

from zsynth.app import create_app
from zsynth.auth import AUTHENTICATOR, Authenticator
from zsynth.config import Settings

from .helpers import FakeClock


def clocked_app(settings: Settings) -> web.Application:
    """The speech front whose authenticator runs on a FakeClock (``app[AUTHENTICATOR].clock``) the test moves."""
    app = create_app(settings)
    app[AUTHENTICATOR] = Authenticator.from_settings(settings, clock=FakeClock())
    return app
