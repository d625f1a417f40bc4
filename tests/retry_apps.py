"""Worker apps for the retry tests, served by ``python -m generaldomo worker tests.retry_apps:app``.

Each task is ``FOLDER|ID|N``: its first ``N`` attempts fail and the next one answers its attempt number; every
attempt is recorded as a file in ``FOLDER``, so that a test can count them across processes. ``marked`` fails
with ``Reject(503, retry=True)``, ``raises`` with an exception (a ``500``, retried only when the service's policy
names it).
"""

from __future__ import annotations

import os
from pathlib import Path

from generaldomo import App, Reject

app = App("retries")


def attempt(payload: bytes) -> tuple[int, int]:
    """Record an attempt of the task ``payload``; ``(its number, the failures it asks for)``."""
    folder, name, failures = payload.decode().split("|")
    number = len(list(Path(folder).glob(f"{name}.*"))) + 1
    (Path(folder) / f"{name}.{number}.{os.getpid()}").touch()
    return number, int(failures)


@app.service("marked")
def marked(payload: bytes) -> bytes:
    number, failures = attempt(payload)
    if number <= failures:
        raise Reject(503, f"attempt {number} failed, try again", retry=True)
    return b"%d" % number


@app.service("raises")
def raises(payload: bytes) -> bytes:
    number, failures = attempt(payload)
    if number <= failures:
        raise RuntimeError(f"attempt {number} failed")
    return b"%d" % number
