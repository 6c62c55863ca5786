"""The documentation's examples run against a real local stack, and no page carries an example no test runs.

Every shell and Python example lives in ``docs/examples/`` and is pulled into the pages with pymdownx.snippets
(``--8<-- "docs/examples/<file>"``); the README, which GitHub renders without snippets, repeats some of them verbatim.
Each example runs here as a user would run it (bash or python, in an empty directory, with ZSYNTH_URL and
ZSYNTH_API_KEY set) against ``zsynth serve`` with the shared Piper workers, a key and a moto keys table, and what it
produced is checked: audio decoded and asserted to be speech, printed output parsed. The README's blocks run once
more as a newcomer pastes them: taken from README.md itself, in a fresh shell under ``set -u`` (or the venv's python)
with nothing set but the address of an open front, like the one ``./scripts/dev`` runs.
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from harness.audio import assert_speech, decode_audio
from harness.base import free_port
from harness.fronts import front_process, zsynth_process
from harness.tls_certs import CertAuthority
from harness.voice_clips import reference_file
from zsynth.core.config import Settings

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
PAGES = sorted((ROOT / "docs").glob("*.md"))
KEY = "docs-example-key"
CODE_FENCE = re.compile(r"^```(sh|bash|shell|console|python|py|python3)\b[^\n]*\n(.*?)^```", re.M | re.S)
README_BLOCKS = CODE_FENCE.findall((ROOT / "README.md").read_text())
SNIPPET = re.compile(r'^--8<-- "docs/examples/([\w.-]+)"$')


def speech_file(name: str, text: str, fmt: str = "mp3_44100_128") -> Callable[[Path, str], None]:
    """An ElevenLabs-format audio file the example wrote, checked to be ``text`` spoken."""

    def check(cwd: Path, stdout: str) -> None:
        assert_speech(*decode_audio((cwd / name).read_bytes(), fmt), text)

    return check


def audio_file(name: str, text: str) -> Callable[[Path, str], None]:
    """A file in a container soundfile reads (mp3, wav, ogg), checked to be ``text`` spoken."""

    def check(cwd: Path, stdout: str) -> None:
        samples, rate = sf.read(io.BytesIO((cwd / name).read_bytes()), dtype="float32", always_2d=True)
        assert_speech(samples[:, 0], int(rate), text)

    return check


def all_of(*checks: Callable[[Path, str], None]) -> Callable[[Path, str], None]:
    def check(cwd: Path, stdout: str) -> None:
        for one in checks:
            one(cwd, stdout)

    return check


def printed(pattern: str) -> Callable[[Path, str], None]:
    def check(cwd: Path, stdout: str) -> None:
        assert re.search(pattern, stdout), stdout

    return check


def printed_seconds(low: float, high: float) -> Callable[[Path, str], None]:
    """A line ``<seconds> s of audio`` whose figure lies strictly between ``low`` and ``high``."""

    def check(cwd: Path, stdout: str) -> None:
        match = re.fullmatch(r"(\d+\.\d) s of audio\n", stdout)
        assert match, stdout
        assert low < float(match.group(1)) < high, stdout

    return check


def printed_path_counts(cwd: Path, stdout: str) -> None:
    """The example's two counts are those of the documents build_document makes."""
    from zsynth.documents import build_document

    match = re.fullmatch(r"(\d+) speech paths, (\d+) avatar paths\n", stdout)
    assert match, stdout
    speech, avatar = len(build_document("speech")["paths"]), len(build_document("avatar")["paths"])
    assert (int(match.group(1)), int(match.group(2))) == (speech, avatar), stdout


def pcm_file(name: str, rate: int, text: str) -> Callable[[Path, str], None]:
    def check(cwd: Path, stdout: str) -> None:
        pcm = np.frombuffer((cwd / name).read_bytes(), dtype="<i2").astype(np.float32) / 32768.0
        assert_speech(pcm, rate, text)

    return check


# What each example must leave behind. A new file in docs/examples/ fails the run until it is listed here.
CHECKS: dict[str, Callable[[Path, str], None]] = {
    "first-request.sh": speech_file("hello.mp3", "Hello from zsynth. This speech was made on your own machine."),
    "stream.sh": pcm_file("streamed.pcm", 22050, "Streamed speech arrives sentence by sentence."),
    "openai-speech.sh": audio_file("openai.wav", "The OpenAI dialect, spoken by zsynth."),
    "timestamps.sh": printed(r"^Hello there\.\n$"),
    "token.sh": speech_file("token.mp3", "Spoken with a token."),
    "keys.sh": printed(r"zsk_live_|my-backend"),
    "dictionary-delete.sh": printed(r'^\{"status":\s*"ok"\}\n404\n$'),
    "clone.sh": all_of(speech_file("clone.mp3", "Hello in the cloned voice."), printed(r'"status":\s*"ok"')),
    "openapi.sh": printed(r"(?m)^/v1/audio/speech$"),
    "avatar-token.sh": printed(r'"token":\s*"zsk_temp_'),
    "elevenlabs_sdk.py": speech_file("hello-sdk.mp3", "Hello there."),
    "openai_sdk.py": all_of(
        audio_file("openai.mp3", "Hello from the OpenAI SDK."),
        audio_file("openai-streamed.ogg", "Streamed, chunk by chunk."),
    ),
    "realtime_sdk.py": speech_file("realtime.mp3", "Hello there. This was streamed word by word."),
    "clone_sdk.py": printed(r"^$"),
    "mint_token.py": printed(r"^zsk_temp_[A-Za-z0-9_-]+\n$"),  # URL-safe base64
    # "Hi! This is my cloned voice.": six words, more than a second and within assert_speech's band for them.
    "stream_requests.py": all_of(printed(r"^\d+\.\d s of audio\n$"), printed_seconds(1.0, 7.5)),
    "openapi_document.py": all_of(printed(r"^\d+ speech paths, \d+ avatar paths\n$"), printed_path_counts),
    "bench-vs-piper.sh": printed(r"(?m)^\| one sentence, first byte p50 \| \d+ ms \|"),
}
# Examples that start their own servers and run for minutes from the checkout: the test named here runs each one's
# command from the repository root (reduced) and checks what it prints, instead of the stack above.
RUN_ELSEWHERE: dict[str, str] = {"bench-vs-piper.sh": "tests/test_capacity_tools.py::test_side_by_side_with_piper"}


@pytest.fixture(scope="module")
def stack(redis_url, data_dir, shared_workers, keys_table, tmp_path_factory):
    """A keyed front (with the keys table), the avatar server, and a TLS front for the https variant."""
    tls_dir = tmp_path_factory.mktemp("docs-tls")
    ca = CertAuthority.create(tls_dir)
    ca.issue(tls_dir / "cert.pem", tls_dir / "key.pem")
    common = {"ZSYNTH_API_KEY": KEY, "ZSYNTH_API_KEYS_TABLE": keys_table}
    tls = {"ZSYNTH_TLS_CERT_FILE": str(tls_dir / "cert.pem"), "ZSYNTH_TLS_KEY_FILE": str(tls_dir / "key.pem")}
    avatar_port = free_port()
    avatar_env = {
        "ZSYNTH_REDIS_URL": redis_url,
        "ZSYNTH_DATA_DIR": str(data_dir),
        "ZSYNTH_AVATAR_PORT": str(avatar_port),
        **common,
    }
    with (
        front_process(redis_url, data_dir, **common) as (_, base),
        front_process(redis_url, data_dir, **common, **tls) as (_, tls_base),
        zsynth_process("avatar", avatar_port, avatar_env) as (_, avatar_base),
    ):
        yield {
            "ZSYNTH_URL": base,
            "ZSYNTH_AVATAR_URL": avatar_base,
            "ZSYNTH_API_KEYS_TABLE": keys_table,
            "https": tls_base.replace("http://", "https://"),
            "ca": str(ca.cert_file),
        }


def run_example(name: str, stack: dict[str, str], cwd: Path, **env: str) -> str:
    (cwd / "narrator.wav").write_bytes(reference_file("wav"))
    path = EXAMPLES / name
    command = ["bash", "-euo", "pipefail", str(path)] if name.endswith(".sh") else [sys.executable, str(path)]
    full_env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "ZSYNTH_URL": stack["ZSYNTH_URL"],
        "ZSYNTH_AVATAR_URL": stack["ZSYNTH_AVATAR_URL"],
        "ZSYNTH_API_KEY": KEY,
        "ZSYNTH_API_KEYS_TABLE": stack["ZSYNTH_API_KEYS_TABLE"],
        **env,
    }
    done = subprocess.run(command, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.unit
def test_every_example_is_checked():
    assert sorted(p.name for p in EXAMPLES.iterdir()) == sorted(CHECKS)


@pytest.mark.heavy
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_example_runs(name, stack, tmp_path):
    if name in RUN_ELSEWHERE:
        pytest.skip(f"run by {RUN_ELSEWHERE[name]}")
    stdout = run_example(name, stack, tmp_path)
    CHECKS[name](tmp_path, stdout)


@pytest.mark.heavy
def test_realtime_example_over_tls_needs_no_private_attribute(stack, tmp_path):
    stdout = run_example("realtime_sdk.py", stack, tmp_path, ZSYNTH_URL=stack["https"], SSL_CERT_FILE=stack["ca"])
    CHECKS["realtime_sdk.py"](tmp_path, stdout)


@pytest.mark.unit
def test_pages_hold_no_untested_code():
    """Shell and Python blocks on the pages are snippet includes of existing examples, and every example is used."""
    used: set[str] = set()
    for page in PAGES:
        for _, body in CODE_FENCE.findall(page.read_text()):
            lines = [line for line in body.strip().splitlines() if line.strip()]
            assert lines, f"{page.name}: empty code block"
            for line in lines:
                match = SNIPPET.match(line.strip())
                assert match, f"{page.name}: a shell/Python block must include docs/examples/*: {line!r}"
                assert (EXAMPLES / match.group(1)).is_file(), f"{page.name}: no such example {match.group(1)}"
                used.add(match.group(1))
    assert used == set(CHECKS), f"examples on no page: {set(CHECKS) - used}"


@pytest.mark.heavy
def test_strict_docs_build(tmp_path):
    """The same build scripts/test runs, into a scratch directory: links, anchors and includes all resolve."""
    command = [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "stream_to_file" in (tmp_path / "site" / "http-api" / "index.html").read_text()


def readme_example(body: str) -> str:
    """The docs/examples file a README block is a verbatim copy of (its name picks the check)."""
    names = [p.name for p in EXAMPLES.iterdir() if p.read_text().strip() == body.strip()]
    assert names, f"README block is not a copy of a docs/examples file:\n{body}"
    return names[0]


@pytest.mark.unit
def test_readme_code_is_a_verbatim_copy_of_a_tested_example():
    assert README_BLOCKS, "no code fence found in README.md: the check below would pass on nothing"
    for _, body in README_BLOCKS:
        readme_example(body)


@pytest.fixture(scope="module")
def open_front(redis_url, data_dir, shared_workers):
    """A front with no keys, as ``./scripts/dev`` runs it: open on loopback, any key taken."""
    with front_process(redis_url, data_dir) as (_, base):
        yield base


@pytest.mark.heavy
@pytest.mark.parametrize("index", range(len(README_BLOCKS)))
def test_readme_block_runs_as_pasted_in_a_fresh_shell(index, open_front, tmp_path):
    """The block as README.md has it, in a shell that has set nothing (``bash -u``: an unset variable fails it).

    Only ZSYNTH_URL is given, because the test's front is not on the dev port; the next test holds the blocks'
    default to the dev port. The SDKs come from the venv's ``clients`` extra, as the README says to install them.
    """
    lang, body = README_BLOCKS[index]
    shell = lang in ("sh", "bash", "shell", "console")
    script = tmp_path / ("block.sh" if shell else "block.py")
    script.write_text(body)
    command = ["bash", "-euo", "pipefail", str(script)] if shell else [sys.executable, str(script)]
    fresh = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        command, cwd=tmp_path, env={**fresh, "ZSYNTH_URL": open_front}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"README block {index} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    script.unlink()
    CHECKS[readme_example(body)](tmp_path, done.stdout)


@pytest.mark.unit
def test_readme_blocks_default_to_the_dev_stack():
    """Every block that names a default address names the one ``./scripts/dev`` serves on."""
    dev = Settings.from_env({})
    defaults = {m for _, body in README_BLOCKS for m in re.findall(r"https?://[\w.]+:\d+", body)}
    assert defaults == {f"http://{dev.http.host}:{dev.http.port}"}


@pytest.mark.unit
def test_readme_python_needs_only_the_clients_extra():
    """What the README's Python blocks import is the standard library or the ``clients`` extra it says to install."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    clients = {re.split(r"[=<>\[;]", req)[0].replace("-", "_") for req in extras["clients"]}
    assert "zsynth[clients]" in extras["test"], "the test install must include the SDKs the README uses"
    imported: set[str] = set()
    for lang, body in README_BLOCKS:
        if lang.startswith("py"):
            for node in ast.walk(ast.parse(body)):
                if isinstance(node, ast.Import):
                    imported |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module:
                    imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) == clients
