"""A worker app for the dead letters' tests, served by ``python -m generaldomo worker tests.dead_apps:app``.

``echo-parse`` fails (``ValueError``: a ``500``) until the file its payload names exists: a poison task, until the fix.
"""

from __future__ import annotations

from pathlib import Path

from generaldomo import App

app = App("dead")


@app.service("echo-parse")  # (the test keys' worker may serve echo* only)
def parse(payload: bytes) -> bytes:
    marker = Path(payload.decode())
    if not marker.exists():
        raise ValueError(f"cannot parse until {marker.name} exists")
    return b"parsed " + marker.name.encode()
