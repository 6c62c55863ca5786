"""Install tools: unpin_wheel.py keeps a valid wheel; scripts/install brings every program the tests call."""

from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path

import pytest

from scripts.unpin_wheel import record_hash, unpin

pytestmark = pytest.mark.unit

METADATA = (
    "Metadata-Version: 2.1\nName: pinned\nVersion: 1.0\nRequires-Dist: torch==2.6.0\n"
    'Requires-Dist: numpy<2; python_version < "3.13"\nSummary: a pinned package\n\nRequires-Dist: in the body stays\n'
)


def make_wheel(path: Path) -> None:
    files = {"pinned/__init__.py": b"VALUE = 1\n", "pinned-1.0.dist-info/METADATA": METADATA.encode()}
    record = "".join(f"{name},{record_hash(data)},{len(data)}\n" for name, data in files.items())
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("pinned-1.0.dist-info/RECORD", record + "pinned-1.0.dist-info/RECORD,,\n")


def test_unpinned_wheel_lists_no_dependencies_and_its_record_matches(tmp_path):
    wheel = tmp_path / "pinned-1.0-py3-none-any.whl"
    make_wheel(wheel)
    unpin(wheel)
    with zipfile.ZipFile(wheel) as rewritten:
        metadata = rewritten.read("pinned-1.0.dist-info/METADATA").decode()
        assert metadata == (
            "Metadata-Version: 2.1\nName: pinned\nVersion: 1.0\nSummary: a pinned package\n\n"
            "Requires-Dist: in the body stays\n"
        )
        assert rewritten.read("pinned/__init__.py") == b"VALUE = 1\n"
        rows = list(csv.reader(io.StringIO(rewritten.read("pinned-1.0.dist-info/RECORD").decode())))
        for name, digest, size in rows:
            if digest:
                data = rewritten.read(name)
                assert (digest, int(size)) == (record_hash(data), len(data)), name
        assert sorted(r[0] for r in rows) == sorted(rewritten.namelist())


def test_the_install_script_installs_every_program_the_docs_examples_call():
    # A fresh Debian has neither curl nor shellcheck: the README's first request, the docs' shell examples
    # (run by tests/test_docs.py) and scripts/test need them, so scripts/install must bring them.
    root = Path(__file__).resolve().parent.parent
    install = (root / "scripts" / "install").read_text()
    examples = "\n".join(path.read_text() for path in sorted((root / "docs" / "examples").glob("*.sh")))
    called = {program for program in ("curl", "jq", "wget", "openssl", "redis-cli") if f"{program} " in examples}
    assert "curl" in called  # the check reads the examples it means to
    for program in (*called, "redis-server", "redis-sentinel", "shellcheck", "chromium", "systemd", "prometheus"):
        assert f"need_apt+=({program})" in install, program
    assert "./scripts/test" in (root / ".ci" / "run").read_text()  # CI runs the README's test command, and only it
