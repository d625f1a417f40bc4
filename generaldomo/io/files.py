"""Files written whole or not at all: the broker's address file and its state directory use this one way.

This module owns the atomic write: the bytes go to a temporary file in the target's directory, which is
flushed to disk (``fsync``), renamed over the target, and the directory itself is flushed, so that a reader
(or a broker started after a kill -9 or a power cut) sees the old content, or all of the new one, never a
mix and never an empty file. It knows nothing of what the bytes mean.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write(path: str | os.PathLike[str], data: bytes, what: str = "file") -> None:
    """Replace the file at ``path`` by ``data`` atomically (the new file is private to its owner, mode 0600);
    an OSError names ``what`` and the path."""
    target = Path(path)
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as error:
        raise OSError(error.errno, f"cannot write the {what} {target}: {error.strerror}") from error
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    sync_directory(target.parent)


def sync_directory(path: str | os.PathLike[str]) -> None:
    """Flush a directory's entries (a rename in it) to disk."""
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
