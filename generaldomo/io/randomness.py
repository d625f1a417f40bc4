"""Unpredictable bytes for ids: the broker's task ids and the Python client's request ids.

This module owns where ids come from: ``os.urandom`` (the kernel's CSPRNG), fetched a few kilobytes at a time
so that an id costs no system call of its own. Nobody can predict an id from the ones they saw, so a peer that
sees ids on the wire cannot send the next ones before their owner does. A pool is not thread-safe: each user
draws under a lock of its own (the broker's loop is one thread; the Client draws under its session lock).
"""

from __future__ import annotations

import os

__all__ = ["RandomPool"]


class RandomPool:
    """``os.urandom`` bytes, fetched ``chunk`` bytes at a time; each byte is handed out once."""

    def __init__(self, chunk: int = 4096) -> None:
        self._chunk, self._pool, self._at = chunk, b"", 0

    def __call__(self, size: int) -> bytes:
        at = self._at
        if at + size > len(self._pool):
            self._pool, at = os.urandom(max(self._chunk, size)), 0
        self._at = at + size
        return self._pool[at : at + size]
