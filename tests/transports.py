"""The two broker transports as test parameters (the server transport carries the ``needs_draft`` marker), and
endpoints where nothing listens yet."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

# conftest.py skips the tests marked needs_draft when pyzmq lacks the draft sockets (and GENERALDOMO_ALLOW_NO_DRAFT
# is set); parametrise a test with TRANSPORTS (or take the ``transport`` fixture) and its server case is marked.
TRANSPORTS = ("router", pytest.param("server", marks=pytest.mark.needs_draft))


def free_tcp_endpoint() -> str:
    """A loopback port nothing listens on (bound, then closed at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


def unbound_endpoint(scheme: str, tmp_path: Path, name: str) -> str:
    """An endpoint of ``scheme`` (``ipc`` or ``tcp``) that nothing binds yet: for a peer that starts before its
    broker."""
    return f"ipc://{tmp_path}/{name}.sock" if scheme == "ipc" else free_tcp_endpoint()
