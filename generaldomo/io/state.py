"""The broker's state directory (``--state-dir``): what an operator changed at run time survives a restart.

This module owns the directory's files and their rules:

- ``state.json``: the flow limits changed at run time (``mmi.flow``, ``generaldomo flow``), per service name,
  each with the *base*: the limits the broker's configuration (``--flow``, ``core.set_flow`` before it runs)
  gave that name when the change was made. Written whole by rename (:mod:`generaldomo.io.files`) on each
  change, before the change's answer is sent; read at start, before the first request: an entry applies only
  if the configuration still gives its service the same base, otherwise the configuration changed since and
  wins (logged). A change back to the base removes its entry.
- ``handover.key``: 32 random bytes made once, private to the owner (mode 0600): every broker instance
  started on this directory signs the tickets of the tasks it hands to workers with it, and so can verify the
  tickets of earlier instances (docs/protocol.rst, *Hand-over*).
- ``lock``: held (``flock``) for the broker's life, so that two brokers never share a directory; the kernel
  releases it when the process ends, kill -9 included.

A state file that cannot be read or does not validate stops the broker at start with an error naming it
(starting without the operator's limits could flood the services they protect). It knows nothing of sockets
or of the core beyond the flow limits' form and the :class:`~generaldomo.sansio.mmi.FlowChange` it reports.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from generaldomo.errors import StateError as StateError  # importable from here, as before
from generaldomo.io import files
from generaldomo.sansio.flow import FlowLimits
from generaldomo.sansio.mmi import FlowChange

log = logging.getLogger(__name__)

VERSION = 1
STATE_FILE = "state.json"
KEY_FILE = "handover.key"
LOCK_FILE = "lock"
KEY_BYTES = 32
MAX_STATE_BYTES = 64 * 1024 * 1024  # a state file larger than this is not one this code wrote
_UNSET = FlowLimits()


@attrs.frozen(slots=True)
class Entry:
    """Limits set at run time for a service name, the base they replaced, and when (UTC, ISO 8601)."""

    limits: FlowLimits
    base: FlowLimits
    changed: str


class StateDir:
    """An open, locked state directory; see the module docstring."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StateError(f"cannot use the state directory {self.path}: {error.strerror}") from error
        self._lock = self._take_lock()
        self.reused = True  # a broker ran on this directory before (its hand-over key was there)
        try:
            self.entries: dict[str, Entry] = _read(self.path / STATE_FILE)
            self.handover_key = self._key()
        except BaseException:
            self.close()
            raise
        self._base: dict[str, FlowLimits] = {}

    def _take_lock(self) -> int:
        descriptor = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise StateError(f"the state directory {self.path} is in use by another broker") from None
        return descriptor

    def _key(self) -> bytes:
        path = self.path / KEY_FILE
        try:
            key = path.read_bytes()
        except FileNotFoundError:
            key = secrets.token_bytes(KEY_BYTES)
            files.atomic_write(path, key, "hand-over key")
            log.info("made a new hand-over key in %s", path)
            self.reused = False
            return key
        except OSError as error:
            raise StateError(f"cannot read the hand-over key {path}: {error.strerror}") from error
        if len(key) != KEY_BYTES:
            raise StateError(f"the hand-over key {path} is {len(key)} bytes, not {KEY_BYTES}")
        return key

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
            self._write()
        if self.entries:
            log.info("restored the run-time flow limits of %s", ", ".join(sorted(self.entries)))
        return [FlowChange(name, entry.limits) for name, entry in self.entries.items()]

    def record(self, changes: Sequence[FlowChange]) -> None:
        """Remember run-time ``changes`` (in order) and write the state file if that changed what it holds."""
        before = dict(self.entries)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for change in changes:
            base = self._base.get(change.name, _UNSET)
            if change.limits == base:
                self.entries.pop(change.name, None)
            elif (entry := self.entries.get(change.name)) is None or entry.limits != change.limits:
                self.entries[change.name] = Entry(change.limits, base, now)
        if self.entries != before:
            self._write()

    def _write(self) -> None:
        files.atomic_write(self.path / STATE_FILE, encode(self.entries), "broker state file")

    def close(self) -> None:
        """Release the directory (the lock)."""
        if self._lock >= 0:
            with contextlib.suppress(OSError):
                os.close(self._lock)
            self._lock = -1


def encode(entries: Mapping[str, Entry]) -> bytes:
    """The state file's bytes."""
    flows = {
        name: {"limits": _limits(entry.limits), "base": _limits(entry.base), "changed": entry.changed}
        for name, entry in sorted(entries.items())
    }
    return json.dumps({"version": VERSION, "flows": flows}, indent=2).encode() + b"\n"


def _limits(limits: FlowLimits) -> dict[str, Any]:
    return attrs.asdict(limits)


def decode(data: bytes) -> dict[str, Entry]:
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
        raise StateError(str(error)) from error


def _entry(value: Any) -> Entry:
    if not isinstance(value, dict) or not isinstance(value.get("changed", ""), str):
        raise ValueError(f"a flow entry is not an object with limits and base: {value!r:.80}")
    return Entry(_UNSET.merged(value["limits"]), _UNSET.merged(value["base"]), value.get("changed", ""))


def _read(path: Path) -> dict[str, Entry]:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise StateError(f"cannot read the broker state file {path}: {error.strerror}") from error
    if len(data) > MAX_STATE_BYTES:
        raise StateError(f"the broker state file {path} is larger than {MAX_STATE_BYTES} bytes")
    try:
        return decode(data)
    except StateError as error:
        raise StateError(f"the broker state file {path} is unusable ({error}); fix or remove it") from error
