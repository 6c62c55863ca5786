"""The engine profiles (zsynth/core/engines.py): each complete, each loader there, and no engine name compared
anywhere else, so a new engine is its module and its profile, and a forgotten table cannot fall back silently."""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest

from workers.memory import ceiling_for
from zsynth.core import engines
from zsynth.core.config import Settings, default_engine_threads, default_workers
from zsynth.core.engines import PROFILES, EngineProfile, profile
from zsynth.core.text.normalize import wants_normalization
from zsynth.core.text.sentences import word_bound
from zsynth.services.voices import builtin_voices

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
NAMES = frozenset(PROFILES)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_is_complete_and_its_loader_exists(name: str) -> None:
    found = profile(name)
    assert found.name == name
    for item in dataclasses.fields(EngineProfile):
        value = getattr(found, item.name)
        if isinstance(value, bool):
            continue  # a yes or a no is always set
        assert value not in (None, "", (), 0), f"{name}: {item.name} is empty"
    assert found.builtin_voices and found.languages and found.model.model_id.startswith("zsynth_")
    module_name, _, function = found.loader.partition(":")
    assert callable(getattr(importlib.import_module(module_name), function)), found.loader


def test_an_unknown_engine_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="piper, turbo, simulated"):
        profile("kokoro")
    with pytest.raises(ValueError):
        Settings.from_env({"ZSYNTH_ENGINE": "kokoro"})


def test_every_engine_dependent_choice_reads_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Change a profile and each choice follows it: nothing keeps a table of its own."""
    changed = dataclasses.replace(
        engines.PIPER,
        word_chars=77,
        needs_normalization=True,
        memory_ceiling=123,
        workers_per_box="one",
        threads_per_job="one",
        builtin_voices=(engines.BuiltinVoice("ann", "Ann", "Another voice."),),
    )
    monkeypatch.setattr(engines, "PROFILES", {**engines.PROFILES, "piper": changed})
    assert word_bound("piper") == 77
    assert wants_normalization("auto", "piper")
    assert ceiling_for("piper", 0) == 123
    assert default_workers("piper", 8) == 1 and default_engine_threads("piper", 8) == 1
    assert [v.voice_id for v in builtin_voices("piper")] == ["ann"]


def _engine_name_uses(path: Path) -> list[str]:
    """Places in ``path`` that compare an engine name or key a table by one."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        literals: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            literals = [node.left, *node.comparators]
        elif isinstance(node, ast.Dict):
            literals = [key for key in node.keys if key is not None]
        elif isinstance(node, ast.Set):
            literals = list(node.elts)
        elif isinstance(node, ast.Match):
            literals = [case.pattern.value for case in node.cases if isinstance(case.pattern, ast.MatchValue)]
        for literal in literals:
            if isinstance(literal, ast.Constant) and literal.value in NAMES:
                found.append(f"{path}:{literal.lineno}: {literal.value!r}")
        if isinstance(node, ast.Compare) and any(isinstance(c, ast.Tuple | ast.List) for c in node.comparators):
            for seq in node.comparators:
                for elt in getattr(seq, "elts", []):
                    if isinstance(elt, ast.Constant) and elt.value in NAMES:
                        found.append(f"{path}:{elt.lineno}: {elt.value!r}")
    return found


def test_no_engine_name_is_compared_outside_the_profiles() -> None:
    sources = [*(ROOT / "zsynth").rglob("*.py"), *(ROOT / "workers").rglob("*.py")]
    offenders = [
        hit
        for path in sources
        if path.name != "engines.py" or path.parent.name != "core"
        for hit in _engine_name_uses(path)
    ]
    assert not offenders, "engine names compared outside zsynth/core/engines.py:\n" + "\n".join(offenders)


def test_the_checker_finds_a_table_keyed_by_engine(tmp_path: Path) -> None:
    """The AST check above can fail: it finds each shape of the old tables."""
    sample = tmp_path / "tables.py"
    sample.write_text('T = {"piper": 1}\nS = {"turbo"}\nok = e == "simulated"\nz = e in ("piper", "x")\n')
    assert len(_engine_name_uses(sample)) == 4
