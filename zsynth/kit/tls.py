"""TLS for the HTTP servers: the server context built from ZSYNTH_TLS_CERT_FILE/KEY_FILE, and its reload on SIGHUP.

A reload loads the files into the *same* :class:`ssl.SSLContext` the listening socket uses, so new handshakes get
the new certificate while connections already open keep theirs: nothing is dropped. The files are first loaded into
a scratch context, so a half-written or mismatched pair is refused and the old certificate stays in service.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from zsynth.core.config import Settings
from zsynth.core.optional import load

logger = logging.getLogger(__name__)


class TlsError(RuntimeError):
    """The certificate or key cannot be loaded; the message names the files."""


def _load(context: ssl.SSLContext, cert: Path, key: Path) -> None:
    try:
        context.load_cert_chain(certfile=cert, keyfile=key)
    except (OSError, ssl.SSLError) as err:
        raise TlsError(f"cannot load TLS certificate {cert} with key {key}: {err}") from err


def _new_context() -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def server_context(settings: Settings) -> ssl.SSLContext | None:
    """The server's TLS context, or None when the API serves plain HTTP."""
    if settings.http.tls_cert_file is None or settings.http.tls_key_file is None:
        return None
    context = _new_context()
    _load(context, settings.http.tls_cert_file, settings.http.tls_key_file)
    return context


def reload(context: ssl.SSLContext, settings: Settings) -> bool:
    """Re-read the certificate files into ``context``; on a bad pair keep the old one and return False."""
    if settings.http.tls_cert_file is None or settings.http.tls_key_file is None:
        return False
    try:
        _load(_new_context(), settings.http.tls_cert_file, settings.http.tls_key_file)  # check first, never half-load
        _load(context, settings.http.tls_cert_file, settings.http.tls_key_file)
    except TlsError as err:
        logger.error("TLS reload refused, the old certificate stays in use: %s", err)
        return False
    logger.info("TLS certificate reloaded from %s", settings.http.tls_cert_file)
    return True


def certificate_expiry(cert: Path) -> float | None:
    """The Unix time the first certificate of the PEM file ``cert`` (the server's own) expires; None if unreadable.

    cryptography is imported here, only when TLS is configured.
    """
    x509 = load("cryptography.x509", "reading the TLS certificate's expiry")
    try:
        expiry: float = x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc.timestamp()
        return expiry
    except (OSError, ValueError) as err:
        logger.warning("TLS certificate %s: expiry not read (%s)", cert, err)
        return None
