"""Where the command's log lines go and how they look: ``-v``/``-vv``, ``--log-format text|json``, ``--log-file``.

This module owns the logging set-up of every command: the level from the verbosity (warnings; ``-v`` info;
``-vv`` debug, which adds one line per task on a worker and per dispatch on a broker), the format (``text``:
time, logger, level, message; ``json``: one object per line with ``time``, ``level``, ``logger``, ``message``
and, for an exception, ``exception``), and the destination (stderr, or a file appended to). It knows nothing of
what the commands log.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Final

__all__ = ["FORMATS", "TEXT", "JsonFormatter", "configure"]

FORMATS: Final = ("text", "json")
TEXT: Final = "%(asctime)s %(name)s %(levelname)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (ISO 8601, UTC), level, logger, message, exception (if any)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        moment = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def configure(verbosity: int, form: str = "text", path: str | None = None) -> None:
    """Send the log to ``path`` (appended; stderr when None) in ``form``, at the level ``verbosity`` gives."""
    if form not in FORMATS:
        raise ValueError(f"--log-format is one of {', '.join(FORMATS)}, not {form!r}")
    handler: logging.Handler = logging.FileHandler(path) if path else logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json" else logging.Formatter(TEXT))
    level = logging.DEBUG if verbosity > 1 else logging.INFO if verbosity else logging.WARNING
    logging.basicConfig(level=level, handlers=[handler], force=True)
