"""The broker's state directory (``--state-dir``): what an operator changed at run time survives a restart.

This module owns the directory's files and their rules:

- the directory: made private to the broker's user (mode 0700) if missing; one that belongs to another user or
  that others may write to is refused (whoever can write there can plant a key or a link). Its files are read
  and written through :mod:`generaldomo.io.files` (regular files only, never through a symbolic link, bounded).
- ``state.json``: the flow limits changed at run time (``mmi.flow``, ``generaldomo flow``), per service name,
  each with the *base*: the limits the broker's configuration (``--flow``, ``core.set_flow`` before it runs)
  gave that name when the change was made. Written whole by rename, off the broker's loop: a writer thread
  takes the latest entries for each write (changes made meanwhile go into the next one, coalesced; one line
  per entry, encoded an entry at a time so that the loop gets the interpreter between batches of them), and the
  loop holds the answer to a change (and what follows it to the same peers) until the write holding the change
  is on disk (:attr:`StateDir.durable`); other peers are served meanwhile. Read at start, before the first
  request: an entry applies only if the configuration still gives its service the same base, otherwise the
  configuration changed since and wins (logged). A change back to the base removes its entry. Its size follows
  the flow entries the core admits (each charged to the connection that set it).
- ``handover.key``: 32 random bytes made once, private to the owner (mode 0600): every broker instance
  started on this directory signs the tickets of the tasks it hands to workers with it, and so can verify the
  tickets of earlier instances (docs/protocol.rst, *Hand-over*).
- ``queue.log``: the write-ahead log of the queues (:mod:`generaldomo.io.hub.wal`: requests accepted and not yet
  answered, kept answers), replayed at start; opened here (:meth:`StateDir.open_log`), set aside if unusable.
- ``lock``: held (``flock``) for the broker's life, so that two brokers never share a directory; the kernel
  releases it when the process ends, kill -9 included. Under it, the temporary files a kill -9 during a write
  left are removed at start.

A file the broker cannot use (not a regular file, a link, too large, not valid, a key of the wrong size, not
private) is set aside, renamed ``NAME.unusable-TIMESTAMP`` and logged, and the broker serves without it: the
configured limits apply (and a new hand-over key: tasks handed out before are not recovered). A directory it
cannot use, or a write that fails, stops it with an error naming them. It knows nothing of sockets or of the
core beyond the flow limits' form and the :class:`~generaldomo.sansio.broker.mmi.FlowChange` it reports.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.io import files
from generaldomo.io.hub.wal import LOG_FILE, Fsync, WriteAheadLog
from generaldomo.sansio.broker.flow.flow import FlowLimits, limits_json
from generaldomo.sansio.broker.journal import Decoded
from generaldomo.sansio.broker.mmi import FlowChange

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["StateError"])

__all__ = [
    "KEY_BYTES",
    "KEY_FILE",
    "KEY_KIND",
    "LOCK_FILE",
    "MAX_STATE_BYTES",
    "PAUSE_EVERY",
    "STATE_FILE",
    "STATE_KIND",
    "VERSION",
    "SavedFlow",
    "StateDir",
    "decode",
    "encode",
]

log = logging.getLogger(__name__)

VERSION = 1
STATE_FILE = "state.json"
KEY_FILE = "handover.key"
LOCK_FILE = "lock"
KEY_BYTES = 32
MAX_STATE_BYTES = 64 * 1024 * 1024  # a state file larger than this is not one this code wrote
STATE_KIND = files.FileKind("broker state file", MAX_STATE_BYTES, follow=False, private=True)
KEY_KIND = files.FileKind("hand-over key", KEY_BYTES, follow=False, private=True, strict=True)
_UNSET = FlowLimits()
PAUSE_EVERY = 64  # entries the writer thread encodes between two chances for the loop to take the GIL


@attrs.frozen(slots=True)
class SavedFlow:
    """Limits set at run time for a service name, the base they replaced, and when (UTC, ISO 8601)."""

    limits: FlowLimits
    base: FlowLimits
    changed: str


class StateDir:
    """An open, locked state directory; see the module docstring."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            files.make_directory(self.path, 0o700)
            self._dir = files.check_directory(self.path, private=True)
        except OSError as error:
            raise errors.StateError(f"cannot use the state directory {self.path}: {error.strerror}") from error
        self._lock = -1
        self._writer: _Writer | None = None
        try:
            self._lock = self._take_lock()
            removed = sum(files.remove_leftovers(self._dir, name) for name in (STATE_FILE, KEY_FILE, LOG_FILE))
            if removed:
                log.info("removed %d temporary files an interrupted write left in %s", removed, self.path)
            self.reused = True  # a broker ran on this directory before (its hand-over key was there)
            self.entries: dict[str, SavedFlow] = self._read()
            self.handover_key = self._key()
        except BaseException:
            self.close()
            raise
        self._base: dict[str, FlowLimits] = {}
        self._guard = threading.Lock()  # the entries, between the loop (record) and the writer thread
        self.generation = 0  # of the entries: one more for each change of what the state file holds

    def _take_lock(self) -> int:
        try:
            descriptor = files.lock(self._dir, LOCK_FILE)
        except OSError as error:
            if error.errno not in (errno.ELOOP, errno.EINVAL):
                raise errors.StateError(
                    f"cannot lock the state directory ({self.path / LOCK_FILE}: {error.strerror})"
                ) from error
            self._set_aside(LOCK_FILE, str(error.strerror))  # a link or a FIFO planted as the lock
            return self._take_lock()
        if descriptor is None:
            raise errors.StateError(f"the state directory {self.path} is in use by another broker")
        return descriptor

    def _set_aside(self, name: str, why: str) -> None:
        """Rename the unusable file ``name`` with a timestamp, and log it (the broker serves without it)."""
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        try:
            aside = files.set_aside(self._dir, name, stamp)
        except OSError as error:
            raise errors.StateError(
                f"the file {self.path / name} is unusable ({why}) and cannot be set aside: {error.strerror}"
            ) from error
        log.error("the file %s is unusable (%s): set aside as %s", self.path / name, why, self.path / aside)

    def _read(self) -> dict[str, SavedFlow]:
        try:
            return decode(files.read(STATE_FILE, STATE_KIND, directory=self._dir))
        except FileNotFoundError:
            return {}
        except OSError as error:
            why = str(error.strerror)
        except errors.StateError as error:
            why = str(error)
        self._set_aside(STATE_FILE, why)
        log.error("the run-time flow limits it held are lost: the configured ones apply")
        return {}

    def _key(self) -> bytes:
        try:
            key = files.read(KEY_FILE, KEY_KIND, directory=self._dir)
            if len(key) == KEY_BYTES:
                return key
            self._set_aside(KEY_FILE, f"{len(key)} bytes, not {KEY_BYTES}")
        except FileNotFoundError:
            pass
        except OSError as error:
            self._set_aside(KEY_FILE, str(error.strerror))
        key = secrets.token_bytes(KEY_BYTES)
        try:
            files.write_in(self._dir, KEY_FILE, key, 0o600)
        except OSError as error:
            raise errors.StateError(
                f"cannot write the hand-over key {self.path / KEY_FILE}: {error.strerror}"
            ) from error
        log.info("made a new hand-over key in %s", self.path / KEY_FILE)
        self.reused = False
        return key

    def open_log(self, fsync: Fsync, limit: int, keep: float) -> tuple[WriteAheadLog, Decoded]:
        """The write-ahead log (flushed by ``fsync``, at most ``limit`` bytes when read, kept answers ``keep``
        seconds), and what it held: nothing if there was none, or if the file was unusable (then set aside)."""
        wal = WriteAheadLog(self._dir, str(self.path / LOG_FILE), fsync, limit, keep)
        try:
            return wal, wal.read()
        except OSError as error:
            self._set_aside(LOG_FILE, str(error.strerror))
            log.error("the queued requests and kept answers it held are lost")
            return wal, Decoded()

    def restore(self, configured: Mapping[str, FlowLimits]) -> list[FlowChange]:
        """The run-time changes to apply over the configuration's limits ``configured`` (which become the base
        of later changes); entries whose base the configuration no longer gives are dropped."""
        self._base = dict(configured)
        stale = [name for name, entry in self.entries.items() if entry.base != self._base.get(name, _UNSET)]
        for name in stale:
            log.warning(
                "the configured flow limits of %r changed since a run-time change; the configuration wins", name
            )
            del self.entries[name]
        if stale:
            self._write(encode(self.entries))
        if self.entries:
            log.info("restored the run-time flow limits of %s", ", ".join(sorted(self.entries)))
        return [FlowChange(name, entry.limits) for name, entry in self.entries.items()]

    def record(self, changes: Sequence[FlowChange]) -> int:
        """Remember run-time ``changes`` (in order) and have the writer thread write the state file if that changed
        what it holds; the generation that holds them (durable once :attr:`durable` reaches it)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        writer = self._writer or self._start_writer()
        with self._guard:
            changed = False
            for change in changes:
                base = self._base.get(change.name, _UNSET)
                if change.limits == base:
                    changed = self.entries.pop(change.name, None) is not None or changed
                elif (entry := self.entries.get(change.name)) is None or entry.limits != change.limits:
                    self.entries[change.name] = SavedFlow(change.limits, base, now)
                    changed = True
            if changed:
                self.generation += 1
            generation = self.generation
        if changed:
            writer.wanted(generation)
        return generation

    def _start_writer(self) -> _Writer:
        self._writer = _Writer(self)  # every generation so far is on disk
        return self._writer

    @property
    def durable(self) -> int:
        """The latest generation in the state file; raises the writer's error if a write failed (StateError)."""
        return self.generation if self._writer is None else self._writer.durable()

    @property
    def ready(self) -> int:
        """A file descriptor readable when :attr:`durable` grew (or a write failed): read it, then look."""
        return (self._writer or self._start_writer()).ready

    def drain(self) -> None:
        """Empty :attr:`ready`'s pipe."""
        if self._writer is not None:
            self._writer.drain()

    def flush(self, timeout: float = 30.0) -> None:
        """Wait (up to ``timeout`` s) until every recorded change is in the state file."""
        if self._writer is not None:
            self._writer.flush(self.generation, timeout)

    def snapshot(self) -> tuple[int, bytes]:
        """The current generation and the state file's bytes for it (the writer thread's call)."""
        with self._guard:
            generation, entries = self.generation, dict(self.entries)
        return generation, encode(entries, PAUSE_EVERY)

    def _write(self, data: bytes) -> None:
        try:
            files.write_in(self._dir, STATE_FILE, data, 0o600)
        except OSError as error:
            raise errors.StateError(
                f"cannot write the broker state file {self.path / STATE_FILE}: {error.strerror}"
            ) from error

    def close(self) -> None:
        """Write what is recorded and not yet written, and release the directory (the lock)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.stop()
        if self._lock >= 0:
            with contextlib.suppress(OSError):
                os.close(self._lock)
            self._lock = -1
        if self._dir >= 0:
            with contextlib.suppress(OSError):
                os.close(self._dir)
            self._dir = -1


class _Writer:
    """The thread that writes the state file: each write takes the latest entries, so that changes made during a
    write are coalesced into the next one; it tells the loop through a pipe when a write is durable."""

    def __init__(self, state: StateDir) -> None:
        self.state = state
        self._condition = threading.Condition()
        self._wanted = self._durable = state.generation
        self._failure: errors.StateError | None = None
        self._stopping = False
        self.ready, self._wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._run, name="generaldomo-state", daemon=True)
        self._thread.start()

    def wanted(self, generation: int) -> None:
        with self._condition:
            self._wanted = max(self._wanted, generation)
            self._condition.notify_all()

    def durable(self) -> int:
        with self._condition:
            if self._failure is not None:
                raise self._failure
            return self._durable

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.ready, 4096)

    def flush(self, generation: int, timeout: float) -> None:
        with self._condition:
            self._condition.wait_for(lambda: self._durable >= generation or self._failure is not None, timeout)
            if self._failure is not None:
                raise self._failure

    def stop(self) -> None:
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        self._thread.join(60)
        for end in (self.ready, self._wake):
            with contextlib.suppress(OSError):
                os.close(end)

    def _run(self) -> None:
        while True:
            with self._condition:
                self._condition.wait_for(lambda: self._wanted > self._durable or self._stopping)
                if self._wanted <= self._durable or self._failure is not None:
                    return  # stopping, and everything is written
            generation, data = self.state.snapshot()
            try:
                self.state._write(data)
            except errors.StateError as error:
                log.error("%s", error)
                with self._condition:
                    self._failure = error
                    self._condition.notify_all()
            else:
                with self._condition:
                    self._durable = max(self._durable, generation)
                    self._condition.notify_all()
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._wake, b"x")


def encode(entries: Mapping[str, SavedFlow], pause_every: int = 0) -> bytes:
    """The state file's bytes: one line per entry, each encoded on its own (json's C encoder, a short call);
    ``pause_every``: let other threads run (the broker's loop) after that many entries."""
    lines = []
    for count, (name, entry) in enumerate(sorted(entries.items()), 1):
        value = {"limits": _limits(entry.limits), "base": _limits(entry.base), "changed": entry.changed}
        lines.append(f"  {json.dumps(name, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}")
        if pause_every and count % pause_every == 0:
            time.sleep(0)  # gives up the GIL: the loop waits for it no longer than one batch of entries
    flows = "{\n" + ",\n".join(lines) + "\n }" if lines else "{}"
    return f'{{"version": {VERSION},\n "flows": {flows}}}\n'.encode()


def _limits(limits: FlowLimits) -> dict[str, Any]:
    return limits_json(limits)


def decode(data: bytes) -> dict[str, SavedFlow]:
    """The entries in a state file's bytes; StateError saying what is wrong otherwise."""
    try:
        body = json.loads(data)
        if not isinstance(body, dict) or body.get("version") != VERSION:
            raise ValueError(f"not a version {VERSION} state file")
        flows = body["flows"]
        if not isinstance(flows, dict):
            raise ValueError("flows is not an object")
        return {str(name): _entry(value) for name, value in flows.items()}
    except (ValueError, KeyError, TypeError, RecursionError) as error:
        raise errors.StateError(str(error)) from error


def _entry(value: Any) -> SavedFlow:
    if not isinstance(value, dict) or not isinstance(value.get("changed", ""), str):
        raise ValueError(f"a flow entry is not an object with limits and base: {value!r:.80}")
    return SavedFlow(_UNSET.merged(value["limits"]), _UNSET.merged(value["base"]), value.get("changed", ""))
