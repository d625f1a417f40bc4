"""In-process endpoints for thread-safe sockets, carried over private ipc sockets.

libzmq deadlocks when CLIENT and SERVER sockets talk over ``inproc://`` (each send locks the peer socket's
mailbox while holding its own; libzmq issue 3048). This module owns the workaround: a SERVER link asked to
bind ``inproc://NAME`` binds a private ``ipc://`` socket in a directory of this process instead and records
the alias; peers of the ``server`` transport connecting to ``inproc://NAME`` are sent there. Like inproc, the
alias exists only inside this process. It knows nothing of the protocol.
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
import threading

_lock = threading.Lock()
_aliases: dict[str, str] = {}
_directory: str | None = None


def _private_directory() -> str:
    global _directory
    if _directory is None:
        _directory = tempfile.mkdtemp(prefix="generaldomo-")
        atexit.register(shutil.rmtree, _directory, True)
    return _directory


def claim(endpoint: str) -> str:
    """The ipc endpoint standing in for ``inproc://`` ``endpoint``, newly reserved for a binding socket."""
    with _lock:
        if endpoint in _aliases:
            raise ValueError(f"{endpoint} is already bound in this process")
        name = hashlib.sha1(endpoint.encode()).hexdigest()[:16]  # short: ipc paths are limited to ~100 bytes
        _aliases[endpoint] = f"ipc://{_private_directory()}/{name}.sock"
        return _aliases[endpoint]


def release(endpoint: str) -> None:
    """Forget the alias of ``endpoint`` (its socket is closed)."""
    with _lock:
        _aliases.pop(endpoint, None)


def resolve(endpoint: str) -> str:
    """Where a thread-safe socket should connect to reach ``endpoint``."""
    with _lock:
        return _aliases.get(endpoint, endpoint)
