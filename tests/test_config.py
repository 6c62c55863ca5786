"""Settings: one frozen group per concern, read from the same ZSYNTH_* variables as ever, changed with ``with_``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from zsynth.core.config import GROUPS, Settings, SettingsError, WsSettings, variables

ROOT = Path(__file__).resolve().parent.parent
# Names the docs show that are not server settings: the examples' base URL, a switch of the demo's screenshot
# script, and two variables docs/voice-library.md records as gone.
NOT_SETTINGS = {"ZSYNTH_URL", "ZSYNTH_UPDATE_SCREENSHOT", "ZSYNTH_VOICES_MIRROR_ATTEMPTS", "ZSYNTH_VOICES_MIRROR_RETRY"}


def documented() -> set[str]:
    """Every ZSYNTH_* name the docs, the README and the systemd environment example mention."""
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "systemd" / "zsynth.env.example"]
    return {name for page in pages for name in re.findall(r"ZSYNTH_[A-Z0-9_]*[A-Z0-9]", page.read_text())}


@pytest.mark.unit
def test_every_documented_variable_is_a_field_and_every_field_is_documented():
    """The docs name no variable Settings does not read, and Settings reads none the docs leave out."""
    fields_by_variable = variables()
    assert documented() - NOT_SETTINGS == set(fields_by_variable)
    # Each lands in a field that exists, at the path variables() gives.
    settings = Settings.from_env({})
    for path in fields_by_variable.values():
        holder: object = settings
        for part in path.split("."):
            holder = getattr(holder, part)


@pytest.mark.unit
def test_each_variable_lands_in_its_group():
    """A variable's value is parsed as before and kept in its concern's group; the rest keep their defaults."""
    settings = Settings.from_env(
        {
            "ZSYNTH_WS_MAX_WORD_CHARS": "50",
            "ZSYNTH_REDIS_URL": "redis://10.0.0.1:6380/2",
            "ZSYNTH_WORKER_ID": "w-7",
            "ZSYNTH_AVATAR_PORT": "9100",
            "ZSYNTH_MAX_QUEUE": "12",
            "ZSYNTH_ENGINE": "simulated",
        }
    )
    assert settings.ws.max_word_chars == 50 and settings.ws.max_queued_chars == 50_000
    assert (settings.redis.url, settings.worker.id, settings.avatar.port) == ("redis://10.0.0.1:6380/2", "w-7", 9100)
    assert (settings.jobs.max_queue, settings.engine) == (12, "simulated")
    assert Settings.from_env({}).redis.url == "redis://127.0.0.1:6379/0"


@pytest.mark.unit
def test_a_malformed_variable_is_named_in_the_error():
    """The error still names the variable, in a group as at the top."""
    with pytest.raises(SettingsError, match="ZSYNTH_WS_MAX_MESSAGE_BYTES='lots' is invalid"):
        Settings.from_env({"ZSYNTH_WS_MAX_MESSAGE_BYTES": "lots"})
    with pytest.raises(SettingsError, match="ZSYNTH_WORKERS='-1' is invalid"):
        Settings.from_env({"ZSYNTH_WORKERS": "-1"})
    with pytest.raises(SettingsError, match="ZSYNTH_TLS_CERT_FILE and ZSYNTH_TLS_KEY_FILE"):
        Settings.from_env({"ZSYNTH_TLS_CERT_FILE": "/etc/cert.pem"})


@pytest.mark.unit
def test_with_changes_one_field_of_a_group_and_keeps_the_rest():
    """``with_(<group>_<field>=...)`` changes that field only; box-wide fields and whole groups go by their names."""
    base = Settings.from_env({"ZSYNTH_WS_MAX_QUEUED_CHARS": "900"})
    changed = base.with_(ws_max_word_chars=7, redis_url="redis://h:1/0", data_dir=Path("/d"), worker_id="x")
    assert (changed.ws.max_word_chars, changed.ws.max_queued_chars) == (7, 900)
    assert (changed.redis.url, changed.data_dir, changed.worker.id) == ("redis://h:1/0", Path("/d"), "x")
    assert base.ws.max_word_chars == 1000  # frozen: the original is untouched
    whole = base.with_(ws=WsSettings(max_word_chars=3))
    assert (whole.ws.max_word_chars, whole.ws.max_queued_chars) == (3, 50_000)
    assert Settings.from_env({}, ws_max_word_chars=9).ws.max_word_chars == 9


@pytest.mark.unit
@pytest.mark.parametrize("key", ["ws_no_such_field", "nosuchgroup_port", "max_word_chars", "ws"])
def test_with_refuses_a_name_that_is_no_field(key):
    """A misspelt or old flat name fails loudly instead of being ignored (``ws`` takes a whole group only)."""
    with pytest.raises(TypeError):
        Settings().with_(**{key: 1 if key != "ws" else {"max_word_chars": 1}})


@pytest.mark.unit
def test_groups_are_frozen_and_their_keys_are_unambiguous():
    """Every group is a frozen dataclass whose fields each name a variable, and no ``<group>_<field>`` key is also a
    box-wide field's name (with_ could not tell them apart)."""
    top = {f.name for f in dataclasses.fields(Settings)}
    for name, cls in GROUPS.items():
        assert "_" not in name and name in top
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(getattr(Settings(), name), dataclasses.fields(cls)[0].name, None)
        for f in dataclasses.fields(cls):
            assert "env" in f.metadata, f"{name}.{f.name} names no variable"
            assert f"{name}_{f.name}" not in top
