"""The alert rules, checked and unit-tested by Prometheus's own promtool (Debian's ``prometheus`` package, which
``scripts/install --test`` installs): every alert fires on input series made for it and stays quiet on others."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from harness.base import ROOT

MONITORING = ROOT / "systemd" / "monitoring"
RULES = MONITORING / "zsynth-rules.yml"
RULE_TESTS = MONITORING / "zsynth-rules.test.yml"

#: Every alert issue 40 asks for, by the name the rules give it.
ASKED_FOR = {
    "ZsynthNoLiveWorker",
    "ZsynthFewerWorkersThanExpected",
    "ZsynthQueueGrowing",
    "ZsynthTimeToFirstAudioSlow",
    "ZsynthJobsFailing",
    "ZsynthMemoryCeilingStops",
    "ZsynthRedisPromotion",
    "ZsynthRedisUnreachable",
    "ZsynthFrontDown",
    "ZsynthWorkerDown",
    "ZsynthAuthFailuresSpiking",
    "ZsynthTlsCertificateExpiring",
}


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: scripts/install --test installs Debian's prometheus package"
    return found


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *map(str, args)], cwd=MONITORING, capture_output=True, text=True, timeout=120)


def alerts() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


@pytest.mark.heavy
def test_the_rules_and_the_example_config_pass_promtools_checks():
    checked = run("check", "rules", RULES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = run("check", "config", MONITORING / "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr


@pytest.mark.heavy
def test_the_rules_unit_tests_pass():
    tested = run("test", "rules", RULE_TESTS)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


@pytest.mark.unit
def test_every_alert_asked_for_exists_and_has_a_test_where_it_fires_and_one_where_it_is_quiet():
    assert alerts() == ASKED_FOR
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        assert case["input_series"], case["name"]
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    assert fires == ASKED_FOR, ASKED_FOR - fires
    assert quiet == ASKED_FOR, ASKED_FOR - quiet


@pytest.mark.heavy
@pytest.mark.parametrize("broken", ["ZsynthWorkerDown"])
def test_a_rule_that_no_longer_fires_fails_the_unit_tests(tmp_path, broken):
    """The unit tests catch a broken rule (here the worker-down alert pointed at a job name nobody scrapes)."""
    rules = RULES.read_text().replace('up{job="zsynth-worker"} == 0', 'up{job="zsynth-workers"} == 0')
    assert rules != RULES.read_text()
    (tmp_path / "zsynth-rules.yml").write_text(rules)
    (tmp_path / "zsynth-rules.test.yml").write_text(RULE_TESTS.read_text())
    tested = subprocess.run(
        [promtool(), "test", "rules", "zsynth-rules.test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tested.returncode != 0 and broken in tested.stdout + tested.stderr
