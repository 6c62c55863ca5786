"""Logging set-up: plain lines for people, or one JSON object per line (``ZSYNTH_LOG_JSON=1``).

One record is one line in either form, whatever a client sent: the JSON form escapes through ``json``, the plain one
escapes every control and line-breaking character of the message (a ``%0A`` in a request path cannot forge a line).
Strings a client chose (paths, ids, header values) are logged through :func:`quoted`, which also cuts them short.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Final

from zsynth.core.config import Settings

#: The most characters of one client-chosen string a log line quotes.
QUOTED_MAX_CHARS: Final = 200

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators (some viewers break lines on them too).
_BREAKERS: Final = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029]
_ESCAPES: Final = {code: repr(chr(code))[1:-1] for code in _BREAKERS}


def quoted(value: object, limit: int = QUOTED_MAX_CHARS) -> str:
    """A client-chosen string for a log line: quoted as Python's repr (``\\n`` stays two characters), and cut to
    ``limit`` characters with ``...`` and the full length after it."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}...({len(text)} chars)"


def one_line(text: str) -> str:
    """``text`` with every control and line-breaking character escaped (``\\n``, ``\\x1b``, ``\\u2028``)."""
    return text.translate(_ESCAPES)


class PlainFormatter(logging.Formatter):
    """The plain form: the message is escaped to one line; a traceback still follows on its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        return one_line(super().formatMessage(record))


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
        # json escapes every control character (a newline is \n); U+2028 and U+2029 are escaped too, since
        # ensure_ascii=False would keep them and some readers split lines on them.
        return json.dumps(entry, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def setup_logging(settings: Settings, process: str) -> None:
    """Configure the root logger once for this process."""
    handler = logging.StreamHandler(sys.stderr)
    if settings.telemetry.log_json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(PlainFormatter(f"%(asctime)s %(levelname)s {process} %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.telemetry.log_level.upper())
