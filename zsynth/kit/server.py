"""Start-up shared by every zsynth process: the event loop (uvloop), and for the three servers (speech front,
avatar server, demo) TLS, signals, systemd notification and the drain.

A server runs until SIGTERM or SIGINT, then drains: it stops accepting connections, runs the shutdown hooks (open
WebSockets are closed with 1001 "going away"), lets running HTTP requests finish for up to ZSYNTH_DRAIN_TIMEOUT
seconds, cancels what is left and runs the cleanup contexts. A second SIGTERM or SIGINT during the drain (a second
Ctrl-C) ends it at once: the requests still running are cancelled, the cleanup contexts run at once, newest first,
for at most FORCED_CLEANUP_S seconds, and the process exits 0 like after a complete drain, since both stops were asked
for. This matches the worker, whose second signal aborts its running job.

Every connection has a deadline for its request headers, an idle keep-alive timeout and a per-address cap
(:mod:`zsynth.kit.connections`).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
import ssl
from typing import Any

from aiohttp import web

from zsynth.core.config import Settings
from zsynth.core.runtime import run_forever
from zsynth.core.sdnotify import notify
from zsynth.kit.connections import ConnectionLimits, GuardedSite, handler_options
from zsynth.kit.tls import TlsError, certificate_expiry, server_context
from zsynth.kit.tls import reload as reload_tls
from zsynth.services.metrics import METRICS
from zsynth.services.voices import VoiceConfigError

logger = logging.getLogger(__name__)

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How long a forced stop (a second signal) gives the cancelled requests to end, then the cleanup contexts to run.
FORCED_CANCEL_S = 0.5
FORCED_CLEANUP_S = 3.0
# The soft open-file limit asked for where the hard limit is unlimited (a value the kernel's nr_open allows).
_OPEN_FILES_WITHOUT_HARD_LIMIT = 65536


class _Stop:
    """What the stop signals asked for: the first one a drain, a second one during the drain the end of it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.requested = asyncio.Event()
        self.forced = False
        self._drain: asyncio.Task[Any] | None = None

    def draining(self, task: asyncio.Task[Any] | None) -> None:
        """The task that runs the drain, cancelled by a second signal."""
        self._drain = task

    def on_signal(self, sig: signal.Signals) -> None:
        """Called on the loop (add_signal_handler), not in signal context, so it may log; it only cancels the drain."""
        if not self.requested.is_set():
            self.requested.set()
            return
        if self.forced or self._drain is None:
            return
        self.forced = True
        logger.warning(
            "%s: second stop signal (%s) during the drain: cancelling the open requests and exiting now",
            self.name,
            sig.name,
        )
        self._drain.cancel()


async def serve_app(app: web.Application, settings: Settings, port: int, name: str) -> None:
    """Serve ``app`` on ``settings.http.host:port`` until SIGTERM/SIGINT, then drain (see the module docstring).

    With ZSYNTH_TLS_CERT_FILE/KEY_FILE the port speaks HTTPS and WSS, and SIGHUP reloads the certificate.
    systemd (``Type=notify``) hears READY once the socket listens and STOPPING when the drain starts.
    """
    ssl_context = server_context(settings)
    _record_expiry(app, settings, ssl_context)
    loop = asyncio.get_running_loop()
    # SIGHUP (systemctl reload) re-reads the certificate; without TLS it is ignored rather than ending the process.
    # Its handler goes in before the port listens: whoever sees the port open may send it at once, and its default
    # action would end the process.
    loop.add_signal_handler(signal.SIGHUP, _on_sighup, ssl_context, settings, name, app)
    raise_open_files_limit()
    limits = ConnectionLimits.from_settings(settings)
    options = handler_options(limits)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=settings.http.drain_timeout_s, **options)
    await runner.setup()
    site = GuardedSite(
        runner, settings.http.host, port, limits, options, ssl_context=ssl_context, reuse_port=settings.http.reuse_port
    )
    await site.start()
    # The stop signals keep their default action (end the process) until now: start-up has nothing to drain, and a
    # start-up stuck waiting on a service still ends on the first Ctrl-C.
    stop = _Stop(name)
    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.on_signal, sig)
    scheme = "https" if ssl_context is not None else "http"
    logger.info("%s listening on %s://%s:%d", name, scheme, settings.http.host, port)
    notify(f"READY=1\nSTATUS={name} serving")
    await stop.requested.wait()
    logger.info("%s draining: no new connections; open streams get %gs to finish", name, settings.http.drain_timeout_s)
    notify("STOPPING=1")
    stop.draining(asyncio.current_task())
    try:
        await runner.cleanup()
    except asyncio.CancelledError:
        if not stop.forced:
            raise
        # The cancellation was ours: end it here so the loop's shutdown cancels the requests still running.
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        logger.warning("%s stopped before its drain finished", name)
        await _close_now(runner, app, name)
        return
    logger.info("%s stopped", name)


async def _close_now(runner: web.AppRunner, app: web.Application, name: str) -> None:
    """After a forced stop: cancel the requests still running, then run the app's cleanup, both bounded.

    Left to the event loop's shutdown, the requests would outlive the clients they use, and the cleanup contexts'
    generators would be finalized all at once, in no order (an outer one would find its inner one already closing:
    "athrow(): asynchronous generator is already running").
    """
    server = runner.server
    if server is not None:
        # Connection.shutdown waits for a request for up to its timeout, then cancels it and waits as long again.
        await server.shutdown(FORCED_CANCEL_S / 2)
    # A signal that came during the drain's own cleanup finds some contexts closed: their generators are spent, and
    # closing them again does nothing.
    cleanup = asyncio.ensure_future(app.cleanup())
    done, _ = await asyncio.wait([cleanup], timeout=FORCED_CLEANUP_S)
    if not done:
        cleanup.cancel()
        logger.warning("%s: the cleanup did not end within %gs; exiting without the rest", name, FORCED_CLEANUP_S)
    elif (err := cleanup.exception()) is not None:
        logger.warning("%s: the cleanup after the forced stop failed: %r", name, err)


def raise_open_files_limit() -> None:
    """Raise the soft limit on open files to the hard one: every connection holds a descriptor, and the usual soft
    default (1,024) is reached by a few clients long before the per-address cap or the memory is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, _OPEN_FILES_WITHOUT_HARD_LIMIT)
    if soft != resource.RLIM_INFINITY and target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as err:
            logger.warning("open-file limit stays %d: raising it to %d failed (%s)", soft, target, err)
            return
        logger.info("open-file limit raised from %d to %d", soft, target)


def _on_sighup(ssl_context: ssl.SSLContext | None, settings: Settings, name: str, app: web.Application) -> None:
    if ssl_context is None:
        logger.info("%s: SIGHUP ignored (no TLS certificate to reload)", name)
        return
    if reload_tls(ssl_context, settings):
        _record_expiry(app, settings, ssl_context)


def _record_expiry(app: web.Application, settings: Settings, ssl_context: ssl.SSLContext | None) -> None:
    """Export the expiry of the certificate now in service (zsynth_tls_certificate_expiry_timestamp_seconds)."""
    if ssl_context is None or settings.http.tls_cert_file is None or METRICS not in app:
        return
    expiry = certificate_expiry(settings.http.tls_cert_file)
    if expiry is not None:
        app[METRICS].tls_expiry.labels(str(settings.http.tls_cert_file)).set(expiry)


def run_server(app: web.Application, settings: Settings, port: int, name: str) -> None:
    """Blocking entry of a server command: serve ``app`` on ``port`` until stopped."""
    run_forever(serve_app(app, settings, port, name), fatal=(VoiceConfigError, TlsError))
