"""The state directory's write-ahead log (``queue.log``): the broker's queues survive a restart, a kill -9 included.

This module owns the log file and its writer thread. The broker core makes the journal's records
(:mod:`generaldomo.sansio.broker.core.durable`: a request accepted, a task finished, an answer kept; their bytes
are :mod:`generaldomo.sansio.broker.journal`'s, the one encoding); the loop hands each turn's records to
:meth:`WriteAheadLog.append` (a list appended to, nothing more on the loop) and holds what that turn sends until
:attr:`WriteAheadLog.durable` reaches them. The writer thread takes every record waiting at once (a *group
commit*: one ``write`` and one flush for all the turns served meanwhile), encodes them (giving up the interpreter
every :data:`PAUSE_EVERY` records, so the loop waits at most that long), appends them and flushes them by the
fsync policy:

- ``batch`` (the default): ``fdatasync`` after each group: what the broker answered is on disk, a power cut
  included;
- ``os``: the operating system's buffers: a broker killed (kill -9, a crash) loses nothing, a machine that loses
  power may lose the last seconds.

Why an append-only log rather than SQLite: the records are written once and read once (at start), never
queried; a log is one ``write`` per group, replays in one read, and its bytes are the same that a passive broker
of a pair is sent (one encoder); SQLite would add a second representation and its own locking and checkpoints.

Bounds: what the log holds live is what the core holds (the ledger charges every queued request, within
``held_bytes``, and every kept answer, within ``keep_bytes``); the writer folds what it writes
(:class:`~generaldomo.sansio.broker.journal.Live`) and rewrites the log compacted (the live records, atomically,
by :func:`generaldomo.io.files.write_in`) once the file is larger than :data:`COMPACT_FACTOR` times the live
records plus :data:`COMPACT_SLACK`; a log larger than :func:`log_limit` at start is not one this broker wrote.
At start the log is read (through :mod:`generaldomo.io.files`: a regular file, never a link, bounded), damaged or
cut-short entries are skipped, counted and logged (never a crash), and an unreadable file is set aside by the
state directory (:mod:`generaldomo.io.hub.state`); what it leaves standing is restored into the core and the log
is written again compacted, holding the restored records, before the first message is served. A write that fails
stops the broker (:class:`~generaldomo.errors.StateError`), as the state file's does. It knows nothing of
sockets or of the core beyond the records.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import threading
import time
from collections.abc import Sequence

import generaldomo.errors as errors
from generaldomo.io import files
from generaldomo.sansio.broker.journal import Decoded, JournalRecord, Live, decode, encode
from generaldomo.sansio.broker.report import JournalReport

__all__ = [
    "COMPACT_FACTOR",
    "COMPACT_SLACK",
    "FSYNC_POLICIES",
    "LOG_FILE",
    "PAUSE_EVERY",
    "Fsync",
    "WriteAheadLog",
    "log_limit",
]

log = logging.getLogger(__name__)

LOG_FILE = "queue.log"
COMPACT_FACTOR = 2
COMPACT_SLACK = 4 * 1024 * 1024  # bytes of finished records a log may hold beyond its live ones before compaction
PAUSE_EVERY = 64  # records the writer encodes between two chances for the loop to take the interpreter


class Fsync(enum.Enum):
    """When the log is flushed to disk (the module docstring)."""

    BATCH = "batch"
    OS = "os"


FSYNC_POLICIES = tuple(policy.value for policy in Fsync)


def log_limit(held_bytes: int | None, keep_bytes: int) -> int:
    """The largest log a broker with these budgets writes: its live records, the slack before a compaction, twice
    (a log is compacted when it grows past that; the encoding's overhead is within the slack)."""
    live = (held_bytes if held_bytes is not None else 1 << 34) + keep_bytes
    return COMPACT_FACTOR * (live + COMPACT_SLACK) + COMPACT_SLACK


class WriteAheadLog:
    """The log ``queue.log`` in the state directory ``directory`` (an open, checked descriptor; ``path`` names it in
    messages), flushed by ``fsync``, at most ``limit`` bytes when read; kept answers older than ``keep`` seconds
    are left out of a compaction. :meth:`read` at start, then :meth:`begin`, then :meth:`append` per turn."""

    def __init__(self, directory: int, path: str, fsync: Fsync, limit: int, keep: float) -> None:
        self._dir = directory
        self.path = path
        self.fsync = fsync
        self.kind = files.FileKind("write-ahead log", limit, follow=False, private=True)
        self._keep = keep
        self._live = Live()
        self._fd = -1
        self._size = 0
        self._condition = threading.Condition()
        self._queue: list[JournalRecord] = []
        self._appended = self._durable = 0  # records handed to the writer, and written (and flushed)
        self._failure: errors.StateError | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.ready, self._wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.groups = 0  # group commits written (the status report's)
        self.compactions = 0

    # ------------------------------------------------------------------------------------------- start

    def read(self) -> Decoded:
        """The log's records (none if there is no log); raises OSError if the file cannot be used (the caller sets
        it aside), never on its content: damaged entries are skipped and counted in the result, and logged."""
        try:
            data = files.read(LOG_FILE, self.kind, directory=self._dir)
        except FileNotFoundError:
            return Decoded()
        decoded = decode(data)
        if decoded.damaged:
            log.error(
                "the write-ahead log %s had %d damaged entries: skipped (what they held is lost)",
                self.path, decoded.damaged,
            )  # fmt: skip
        if decoded.truncated:
            log.warning("the write-ahead log %s ended with an entry cut short (a crash during a write)", self.path)
        return decoded

    def begin(self, records: Sequence[JournalRecord]) -> None:
        """Write the log anew holding ``records`` (what was restored), atomically, and start the writer thread."""
        self._live = Live().apply_all(records)
        self._rewrite()
        self._thread = threading.Thread(target=self._run, name="generaldomo-log", daemon=True)
        self._thread.start()

    def _rewrite(self) -> None:
        data = b"".join(map(encode, self._live.records()))
        try:
            files.write_in(self._dir, LOG_FILE, data, 0o600)
            fd = files.open_append(self._dir, LOG_FILE, self.kind)
        except OSError as error:
            raise errors.StateError(f"cannot write the write-ahead log {self.path}: {error.strerror}") from error
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._size = fd, len(data)

    # ------------------------------------------------------------------------------------------- the loop's side

    def append(self, records: list[JournalRecord]) -> int:
        """Have the writer append ``records`` (a turn's); the count that makes them durable (:attr:`durable`)."""
        with self._condition:
            self._queue.extend(records)
            self._appended += len(records)
            self._condition.notify()
            return self._appended

    @property
    def appended(self) -> int:
        """Records handed to the writer so far."""
        return self._appended

    @property
    def durable(self) -> int:
        """Records written (and flushed by the policy) so far; raises the writer's error if a write failed."""
        with self._condition:
            failure, durable = self._failure, self._durable
        if failure is not None:
            raise failure
        return durable

    def report(self) -> JournalReport:
        """The log's figures for the status report (the loop's call; the writer's figures as last seen)."""
        with self._condition:
            written, appended = self._durable, self._appended
        return JournalReport(
            fsync=self.fsync.value, written=written, waiting=appended - written, commits=self.groups,
            compactions=self.compactions, bytes=self._size,
        )  # fmt: skip

    def drain(self) -> None:
        """Empty :attr:`ready`'s pipe (readable when :attr:`durable` grew or a write failed)."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.read(self.ready, 4096)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait (up to ``timeout`` s) until every record appended is written."""
        with self._condition:
            self._condition.wait_for(
                lambda: self._durable >= self._appended or self._failure is not None or self._thread is None,
                timeout,
            )
            if self._failure is not None:
                raise self._failure

    def close(self) -> None:
        """Write what waits, stop the writer and close the log."""
        thread = self._thread
        if thread is not None:
            with self._condition:
                self._stopping = True
                self._condition.notify_all()
            thread.join(60)
            self._thread = None
        for end in (self._fd, self.ready, self._wake):
            if end >= 0:
                with contextlib.suppress(OSError):
                    os.close(end)
        self._fd = self.ready = self._wake = -1

    # ------------------------------------------------------------------------------------------- the writer

    def _run(self) -> None:
        while True:
            with self._condition:
                self._condition.wait_for(lambda: bool(self._queue) or self._stopping)
                if not self._queue or self._failure is not None:
                    return  # stopping, and everything is written
                group, self._queue = self._queue, []
                done = self._appended - len(self._queue)
            failure = None
            try:
                self._write(group)
            except OSError as error:
                failure = errors.StateError(f"cannot write the write-ahead log {self.path}: {error.strerror}")
            except errors.StateError as error:  # (a compaction's)
                failure = error
            if failure is not None:
                log.error("%s", failure)
            with self._condition:  # the loop learns of it by the pipe: durable grew, or it raises the failure
                self._failure = failure
                self._durable = done if failure is None else self._durable
                self._condition.notify_all()
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._wake, b"x")

    def _write(self, group: list[JournalRecord]) -> None:
        chunks = []
        live = self._live
        for count, record in enumerate(group, 1):
            chunks.append(encode(record))
            live.apply(record)
            if count % PAUSE_EVERY == 0:
                time.sleep(0)  # gives up the interpreter: the loop waits for it no longer than one batch of records
        view = memoryview(b"".join(chunks))
        self._size += len(view)
        while view:
            view = view[os.write(self._fd, view) :]
        if self.fsync is Fsync.BATCH:
            os.fdatasync(self._fd)
        self.groups += 1
        if self._size > COMPACT_FACTOR * live.bytes + COMPACT_SLACK:
            live.expire(time.time() - self._keep)
            self._rewrite()  # (write_in flushes the new log and its directory, whatever the policy)
            self.compactions += 1
