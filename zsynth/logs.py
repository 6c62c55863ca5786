"""Logging set-up: plain lines for people, or one JSON object per line (``ZSYNTH_LOG_JSON=1``)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from .config import Settings


class JsonFormatter(logging.Formatter):
    """One JSON object per line with the time, level, logger, message and any ``extra`` ids."""

    _EXTRAS = ("request_id", "job_id", "worker_id")

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in self._EXTRAS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def setup_logging(settings: Settings, process: str) -> None:
    """Configure the root logger once for this process."""
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s {process} %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level.upper())
