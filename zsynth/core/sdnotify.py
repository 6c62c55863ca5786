"""systemd's notify protocol (``Type=notify``): one datagram to ``$NOTIFY_SOCKET``, a no-op outside systemd."""

from __future__ import annotations

import os
import socket


def notify(state: str, env: dict[str, str] | None = None) -> bool:
    """Send ``state`` (e.g. ``READY=1``, ``STOPPING=1``, ``STATUS=...``); return whether a socket was there."""
    address = (env if env is not None else os.environ).get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(state.encode())
    return True
