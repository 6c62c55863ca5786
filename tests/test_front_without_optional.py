"""The front without its optional libraries: a real ``zsynth serve`` whose imports of PyAV, aioboto3, aiobotocore,
boto3, botocore and cryptography fail, as on a machine that lacks them (the device kit of ``scripts/gpu-run``
carries none of them: docs/gpu-run.md).

A ``sitecustomize`` on the front's PYTHONPATH puts a finder first on ``sys.meta_path`` that refuses those packages,
so the front imports them only where it needs them: PyAV for OpenAI's ``aac``, aioboto3 and botocore when a bucket or
a keys table is configured, cryptography when TLS is. Without them it serves PCM, WAV and MP3 as usual (the shared
Piper workers make the audio), and ``aac`` is refused in OpenAI's envelope, the front still serving afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.audio import assert_speech, decode_audio
from harness.base import ROOT
from harness.fronts import front_process

pytestmark = pytest.mark.heavy

HIDDEN = ("av", "aioboto3", "aiobotocore", "boto3", "botocore", "cryptography")
BLOCKER = f"""\
import sys

HIDDEN = {HIDDEN!r}


class _Hidden:
    \"\"\"Refuses the hidden packages as a missing one is refused, and logs each attempt to stderr.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden by the test)", name=name)
        return None


sys.meta_path.insert(0, _Hidden())
"""
PROBE = """\
import importlib
for name in HIDDEN:
    try:
        importlib.import_module(name)
    except ImportError:
        continue
    raise SystemExit(f"{name} imported")
import zsynth.cli, zsynth.speech.app, workers.main
"""
TEXT = "The front speaks without its optional libraries today."


def post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    """POST ``body`` as JSON; the status and the body of the reply, an error's included."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.fixture
def hidden_path(tmp_path: Path) -> str:
    """A PYTHONPATH whose sitecustomize hides :data:`HIDDEN`, ahead of the worktree and the inherited path."""
    folder = tmp_path / "hidden"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(BLOCKER)
    inherited = os.environ.get("PYTHONPATH")
    return os.pathsep.join([str(folder), str(ROOT), *([inherited] if inherited else [])])


@pytest.fixture
def front(redis_url, data_dir, shared_workers, hidden_path, tmp_path) -> Iterator[str]:
    """The hidden-packages front on the shared Redis and Piper workers; its base URL (its log checked after)."""
    log = tmp_path / "front.log"
    with front_process(redis_url, data_dir, log_path=str(log), PYTHONPATH=hidden_path) as (proc, base):
        yield base
        assert proc.poll() is None, "the front died"
    assert "Traceback" not in log.read_text(errors="replace"), log.read_text(errors="replace")[-3000:]


def test_the_blocker_hides_the_packages(hidden_path):
    """The test's premise: under the blocker each hidden package fails to import, the rest of the front does not."""
    done = subprocess.run(
        [sys.executable, "-c", f"HIDDEN = {HIDDEN!r}\n{PROBE}"],
        env={**os.environ, "PYTHONPATH": hidden_path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("path", "output_format"),
    [
        ("/v1/text-to-speech/joe", "pcm_16000"),
        ("/v1/text-to-speech/joe", "wav_22050"),
        ("/v1/text-to-speech/joe/stream", "mp3_44100_128"),
    ],
)
def test_it_serves_pcm_wav_and_mp3(front, path, output_format):
    status, audio = post(f"{front}{path}?output_format={output_format}", {"text": TEXT})
    assert status == 200, audio[:500]
    samples, rate = decode_audio(audio, output_format)
    assert rate == int(output_format.split("_")[1])
    assert_speech(samples, rate, TEXT)


def test_openai_formats_without_pyav(front):
    """OpenAI's route: wav and mp3 as usual; aac, the one container PyAV makes, refused with a clear message."""
    for response_format, decoded_as in (("wav", "wav_24000"), ("mp3", "mp3_44100_128")):
        status, audio = post(
            f"{front}/v1/audio/speech", {"input": TEXT, "voice": "joe", "response_format": response_format}
        )
        assert status == 200, audio[:500]
        assert_speech(*decode_audio(audio, decoded_as), TEXT)
    aac = {"input": TEXT, "voice": "joe", "response_format": "aac"}
    status, refused = post(f"{front}/v1/audio/speech", aac)
    assert status == 400, refused
    error = json.loads(refused)["error"]
    assert error["code"] == "invalid_response_format" and error["param"] == "response_format"
    assert "PyAV" in error["message"] and "wav" in error["message"], error
    # Asked again, the same answer (the failed import is not retried into a crash), and the front still speaks.
    assert post(f"{front}/v1/audio/speech", aac) == (400, refused)
    status, audio = post(f"{front}/v1/text-to-speech/joe?output_format=pcm_24000", {"text": TEXT})
    assert status == 200
    assert_speech(*decode_audio(audio, "pcm_24000"), TEXT)
