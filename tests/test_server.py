"""Server start-up (zsynth.kit.server): a second stop signal during the drain ends it at once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .helpers import ROOT, free_port, wait_for


def _log_has(path: Path, text: str) -> bool:
    return text in path.read_text(errors="replace")


def test_second_signal_during_drain_exits_at_once(private_redis_url, data_dir, tmp_path):
    port = free_port()
    log = tmp_path / "front.log"
    env = {
        **os.environ,
        "ZSYNTH_REDIS_URL": private_redis_url,
        "ZSYNTH_PORT": str(port),
        "ZSYNTH_DATA_DIR": str(data_dir),
        "ZSYNTH_DRAIN_TIMEOUT": "120",  # far longer than the test: only the second signal can end this drain
        "ZSYNTH_LOG_JSON": "false",
    }
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "zsynth", "serve"], env=env, cwd=ROOT, stderr=out, stdout=out)
    try:
        listening = f"front listening on http://127.0.0.1:{port}"
        wait_for(lambda: proc.poll() is not None or _log_has(log, listening), 60, "zsynth serve")
        assert proc.poll() is None, log.read_text()
        # An upload still coming in: the handler waits for the rest of the body, so the drain waits for it.
        upload = socket.create_connection(("127.0.0.1", port), timeout=5)
        body = b'{"text": "A request whose body is still on its way."}'
        upload.sendall(
            b"POST /v1/text-to-speech/v/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body[:10]
        )
        time.sleep(0.3)  # let the front start the handler
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: _log_has(log, "draining"), 10, "the drain to start")
        time.sleep(1.0)
        assert proc.poll() is None, "the open upload holds the drain"
        with_second = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
        elapsed = time.monotonic() - with_second
        text = log.read_text()
        assert proc.returncode == 0, text
        assert elapsed < 5, f"exited {elapsed:.1f}s after the second signal"
        assert "second stop signal (SIGINT) during the drain" in text, text
        assert "stopped before its drain finished" in text, text
        assert "Traceback" not in text, text
        # The held request was cut, not answered.
        upload.settimeout(5)
        assert upload.recv(4096) == b""
        upload.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
