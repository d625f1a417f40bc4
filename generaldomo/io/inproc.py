"""In-process endpoints for thread-safe sockets: real ``inproc://`` where libzmq allows it, else private ipc.

Stock libzmq deadlocks when CLIENT and SERVER sockets talk over ``inproc://`` (libzmq issue 3048): a thread-safe
socket's mailbox is guarded by the socket's own lock, and each end of an inproc pipe posts to the other end's
mailbox while holding its own socket's lock, so two threads take the two locks in opposite orders. The project's
libzmq (:mod:`generaldomo.draft`, patch ``mailbox``) gives the mailbox a lock of its own; :data:`NATIVE` says
whether the running libzmq has it (its marker symbol), and then a SERVER link binds ``inproc://NAME`` itself.

Otherwise (a stock libzmq with drafts), and for a link with CURVE (inproc pipes skip the handshake, so CURVE and
its credentials would not apply), this module carries the endpoint: the link binds a private ``ipc://`` socket in
a directory of this process instead and records the alias; peers of the ``server`` transport connecting to
``inproc://NAME`` are sent there. Like inproc, the alias exists only inside this process. It knows nothing of the
protocol.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import shutil
import threading

from generaldomo.io import files

__all__ = ["MAILBOX_SYMBOL", "NATIVE", "carried", "claim", "release", "resolve"]

MAILBOX_SYMBOL = "zmq_generaldomo_mailbox_lock"  # generaldomo.draft.MAILBOX_SYMBOL (that module imports no zmq)

_lock = threading.Lock()
_aliases: dict[str, str] = {}
_directory: str | None = None


def _native() -> bool:
    """True when the libzmq linked into pyzmq carries the mailbox lock patch."""
    try:
        from zmq.backend.cython import _zmq  # pyzmq >= 26: libzmq is linked into this extension

        return hasattr(ctypes.CDLL(_zmq.__file__), MAILBOX_SYMBOL)
    except (ImportError, OSError):
        return False


NATIVE = _native()


def carried(secure: bool) -> bool:
    """True when a SERVER link (with CURVE if ``secure``) must carry its ``inproc://`` endpoints over ipc."""
    return secure or not NATIVE


def _private_directory() -> str:
    global _directory
    if _directory is None:
        _directory = files.temporary_directory("generaldomo-")
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
    """Where a thread-safe socket should connect to reach ``endpoint`` (itself unless it is carried)."""
    with _lock:
        return _aliases.get(endpoint, endpoint)
