"""pipecat 1.14's three ElevenLabs TTS services, unchanged, in a real pipeline against the full local stack.

pipecat-ai pins protobuf, soundfile and soxr below what zsynth's environment uses, so it lives in its own virtual
environment, ``.venv-pipecat`` (made by ``./scripts/install --test``), and each service runs in a subprocess of it
(``tests/pipecat_client.py``): one turn, an idle wait longer than the service's 10 s keep-alive, a second turn, then
an ``EndFrame``. This test decodes what the pipeline's sink received and judges it as a listener would, and reads the
front's socket log for what the service did on the wire.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.audio import assert_speech
from harness.base import make_settings
from zsynth.speech.app import create_app

from .helpers import socket_log_after_close

ROOT = Path(__file__).resolve().parent.parent
PIPECAT_PYTHON = ROOT / ".venv-pipecat" / "bin" / "python"
KEY = "sk-pipecat-agent"
VOICE = "any-voice"
IDLE_S = 12.0  # past the services' 10 s keep-alive: the socket must stay open and usable through it

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(240)]


@pytest.fixture
async def server(aiohttp_client, redis_url, data_dir, shared_workers):
    """A keyed front with the default socket timeouts (20 s inactivity, 10 s first-message bound)."""
    return await aiohttp_client(create_app(make_settings(redis_url, data_dir, auth_api_keys=(KEY,))))


async def run_pipecat(service: str, base: str, out: Path) -> dict:
    """Run the pipecat pipeline in its own environment, as a subprocess the front's loop keeps serving."""
    assert PIPECAT_PYTHON.exists(), f"{PIPECAT_PYTHON} is missing: ./scripts/install --test makes it"
    proc = await asyncio.create_subprocess_exec(
        str(PIPECAT_PYTHON),
        str(ROOT / "tests" / "pipecat_client.py"),
        service,
        base,
        KEY,
        VOICE,
        str(out),
        "--idle",
        str(IDLE_S),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(proc.communicate(), 200)
    text = output.decode(errors="replace")
    if proc.returncode != 0:
        sys.stderr.write(text[-6000:])
    assert proc.returncode == 0, text[-3000:]
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("service", ["ws", "http", "dialogue"])
async def test_pipecat_service_speaks_two_turns_across_an_idle_keep_alive(server, service, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="zsynth.speech")
    base = f"http://127.0.0.1:{server.server.port}"
    summary = await run_pipecat(service, base, tmp_path)

    assert summary["errors"] == [], summary["errors"]
    assert summary["rate"] == 24000
    for index, text in enumerate(summary["turns"]):
        pcm = (tmp_path / f"turn-{index}.pcm").read_bytes()
        samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0
        assert_speech(samples, summary["rate"], text)
        assert summary["first_audio_s"][index] > 0, summary
        if service != "dialogue":  # the dialogue service pushes no word frames (push_text_frames=False)
            spoken = " ".join(summary["words"][str(index)])
            assert re.sub(r"\W+", " ", spoken).split() == re.sub(r"\W+", " ", text).split(), spoken

    if service == "http":
        socket_lines = [r.getMessage() for r in caplog.records if r.name.startswith("zsynth.speech.ws")]
        assert not [line for line in socket_lines if " open" in line], "the HTTP service opened a socket"
        return
    lines = await socket_log_after_close(caplog)
    opened = [line for line in lines if "multi-stream-input open" in line]
    assert len(opened) == 1, lines  # one socket for both turns: the keep-alive held it through the idle wait
    assert any(re.search(r"closed \(1000\)$", line) for line in lines), lines
    errors = [r.getMessage() for r in caplog.records if r.name == "zsynth.speech.ws.connection"]
    assert not [m for m in errors if re.match(r"socket \S+: [a-z_]+: ", m)], errors
