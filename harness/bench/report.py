"""The report of one benchmark run: the text it printed is the text report; its figures, with what ran and when, are
the JSON report (``python -m harness.bench --report PATH NAME``)."""

from __future__ import annotations

import datetime
import json
import platform
import time
from pathlib import Path
from typing import Any

from zsynth.core.config import usable_cores


class Report:
    """What one run of a benchmark reports: its name, its options, the box, its wall time and its figures."""

    def __init__(self, name: str, options: list[str]) -> None:
        self.name = name
        self.options = options
        self.started = datetime.datetime.now(datetime.UTC)
        self._clock = time.monotonic()
        self.wall_s = 0.0
        self.status = 0
        self.figures: Any = None

    def finish(self, outcome: object) -> int:
        """Take what the benchmark returned (figures, an exit status, or nothing); return the exit status."""
        self.wall_s = time.monotonic() - self._clock
        if isinstance(outcome, bool) or not isinstance(outcome, int):
            self.figures = outcome
        else:
            self.status = outcome
        return self.status

    def as_json(self) -> dict[str, Any]:
        """The JSON report."""
        return {
            "benchmark": self.name,
            "command": " ".join(["python -m harness.bench", self.name, *self.options]),
            "started": self.started.isoformat(timespec="seconds"),
            "wall_s": round(self.wall_s, 1),
            "box": {"cores": usable_cores(), "machine": platform.machine(), "python": platform.python_version()},
            "status": self.status,
            "figures": self.figures,
        }

    def write(self, path: str | Path) -> None:
        """Write the JSON report to ``path``."""
        Path(path).write_text(json.dumps(self.as_json(), indent=1, default=str) + "\n")
