"""Every file the package reads or writes: one opener (:func:`read`), one writer (:func:`write`), one lock.

This module owns how files are opened; no other module opens a file (a test greps the package for it). Rules:

- **Reading** (:func:`read`): regular files only, opened without blocking (a FIFO or a device is refused at
  once, never waited on or read without end) and read up to a bound given by the kind of file (a larger one is
  refused). A :class:`FileKind` says what the file is (its name in errors), its bound, whether a symbolic link is
  refused (``O_NOFOLLOW``: files in a directory the package manages, such as the state directory) or followed
  (paths the operator names, e.g. a key mounted by a container runtime), and whether it holds a secret or state
  (``private``): then it must belong to the user the process runs as (or root), and a file others may read or
  write is refused (``strict``) or accepted with a warning naming it; a link to it that is followed must be
  this user's or root's too (a container runtime's mounted secrets are root's links).
- **Writing** (:func:`write`): the bytes go to a new temporary file ``.NAME.XXXX.tmp`` created exclusively
  (``O_EXCL | O_NOFOLLOW``) with its final mode from the start (never wider, whatever the umask), in a directory
  whose owner and mode are checked first (:func:`check_directory`); it is flushed to disk (``fsync``), renamed
  over the target (a symbolic link planted at the target is replaced, never followed), and the directory is
  flushed, so that a reader (or a process started after a kill -9 or a power cut) sees the old content or all
  of the new one. Each write then deletes the temporary files of the same name a kill -9 left (older than a
  minute: another writer's in flight is not touched); where one writer owns the directory (the state
  directory, under its lock) :func:`remove_leftovers` deletes them all at start.
- **Appending** (:func:`open_append`): a log that one writer extends (the state directory's write-ahead log) is
  made by :func:`write`'s rules and then opened for appending, never through a symbolic link, regular files only.
- **Locking** (:func:`lock`): a lock file in a checked directory, opened with ``O_NOFOLLOW``, held by
  ``flock`` for the process's life.

Errors are ``OSError``s whose ``strerror`` says what is wrong in words (``not a regular file``, ``a symbolic
link``, ``larger than N bytes``, ``owned by another user``), so that callers name the file and add it. It knows
nothing of what the bytes mean.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import secrets
import stat
import tempfile
import time
from pathlib import Path

import attrs

log = logging.getLogger(__name__)

__all__ = [
    "FileKind",
    "check_directory",
    "lock",
    "make_directory",
    "open_append",
    "read",
    "remove_leftovers",
    "write",
]

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_OTHERS = 0o077  # group and other permission bits
_OTHERS_WRITE = 0o022
TEMPORARY_SUFFIX = ".tmp"
LEFTOVER_AGE = 60.0  # seconds after which a writer's temporary file is a leftover of a kill -9 (a write takes ms)


@attrs.frozen
class FileKind:
    """A kind of file the package reads: its name in errors, its size bound, and its rules (module docstring).

    Args:
        what: the file's name in errors (``configuration file``).
        limit: the largest size read, in bytes.
        follow: follow a symbolic link the path names (paths the operator gives) or refuse it.
        private: it holds a secret or state: owned by this user (or root), others' permissions checked.
        strict: with ``private``, refuse a file others may read or write (else a warning).
    """

    what: str
    limit: int
    follow: bool = True
    private: bool = False
    strict: bool = False


def _refused(code: int, reason: str) -> OSError:
    return OSError(code, reason)


def read(path: str | os.PathLike[str], kind: FileKind, *, directory: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` under ``kind``'s rules; OSError (``strerror`` in words, the path
    as its ``filename``) if it is not one, is too large, or is not private enough. ``directory``: a descriptor
    ``path`` is relative to."""
    try:
        return _read(path, kind, directory)
    except OSError as error:
        if error.filename is None:
            error.filename = os.fspath(path)
        raise


def _read(path: str | os.PathLike[str], kind: FileKind, directory: int | None) -> bytes:
    flags = _READ_FLAGS | (0 if kind.follow else os.O_NOFOLLOW)
    if kind.private and kind.follow:  # a link to a secret: only one its user (or root, as a container's) made
        link = os.lstat(path, dir_fd=directory)
        if stat.S_ISLNK(link.st_mode) and link.st_uid not in (os.geteuid(), 0):
            raise _refused(errno.EPERM, f"a symbolic link of another user (uid {link.st_uid})")
    descriptor = _open(path, flags, directory, kind.follow)
    try:
        status = _regular(descriptor)
        if status.st_size > kind.limit:
            raise _refused(errno.EFBIG, f"larger than {kind.limit} bytes")
        if kind.private:
            _check_private(path, kind, status)
        os.set_blocking(descriptor, True)
        chunks, left = [], kind.limit + 1  # a file growing while it is read stops at the bound too
        while left > 0 and (chunk := os.read(descriptor, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(descriptor)
    data = b"".join(chunks)
    if len(data) > kind.limit:
        raise _refused(errno.EFBIG, f"larger than {kind.limit} bytes")
    return data


def _open(path: str | os.PathLike[str], flags: int, directory: int | None, follow: bool) -> int:
    """``os.open``, a symbolic link refused in words where it is not followed."""
    try:
        return os.open(path, flags, dir_fd=directory)
    except OSError as error:
        if error.errno == errno.ELOOP and not follow:
            raise _refused(errno.ELOOP, "a symbolic link (refused here)") from None
        raise


def _regular(descriptor: int) -> os.stat_result:
    """The status of the open file ``descriptor``; OSError if it is not a regular file."""
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
        raise _refused(errno.EINVAL, "not a regular file")
    return status


def _check_private(path: str | os.PathLike[str], kind: FileKind, status: os.stat_result) -> None:
    if status.st_uid not in (os.geteuid(), 0):
        raise _refused(errno.EPERM, f"owned by another user (uid {status.st_uid})")
    mode = stat.S_IMODE(status.st_mode)
    if mode & _OTHERS:
        if kind.strict:
            raise _refused(errno.EPERM, f"readable or writable by others (mode {mode:04o}; chmod 600 it)")
        log.warning("the %s %s is readable or writable by others (mode %04o): chmod 600 it", kind.what, path, mode)


def make_directory(path: str | os.PathLike[str], mode: int = 0o700) -> None:
    """Make the directory ``path`` (and missing parents) with ``mode`` whatever the umask, if it is missing."""
    target = Path(path)
    if target.is_dir():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(target, mode)
        os.chmod(target, mode, follow_symlinks=False)  # the umask removed bits; none added beyond mode


def check_directory(path: str | os.PathLike[str], *, private: bool = False) -> int:
    """Open the directory ``path`` (a descriptor for :func:`read`, :func:`write` and :func:`lock`) after checking
    who may change it: it belongs to this user or root, and others may not write to it (unless it is sticky, as
    ``/tmp``); ``private`` (the state directory): it belongs to this user and no one else may write to it."""
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        status = os.fstat(descriptor)
        mode, owners = stat.S_IMODE(status.st_mode), (os.geteuid(),) if private else (os.geteuid(), 0)
        if status.st_uid not in owners:
            raise _refused(errno.EPERM, f"owned by another user (uid {status.st_uid})")
        if private and mode & _OTHERS_WRITE:
            raise _refused(errno.EPERM, f"writable by others (mode {mode:04o}; chmod 700 it)")
        if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
            raise _refused(errno.EPERM, f"writable by every user (mode {mode:04o})")
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def write(path: str | os.PathLike[str], data: bytes, what: str = "file", mode: int = 0o600) -> None:
    """Replace the file at ``path`` by ``data`` atomically, created with ``mode`` (module docstring); an OSError
    names ``what`` and the path."""
    target = Path(path)
    try:
        directory = check_directory(target.parent)
    except OSError as error:
        raise OSError(error.errno, f"cannot write the {what} {target}: its directory is {error.strerror}") from None
    try:
        write_in(directory, target.name, data, mode)
        remove_leftovers(directory, target.name, LEFTOVER_AGE)
    except OSError as error:
        raise OSError(error.errno, f"cannot write the {what} {target}: {error.strerror}") from None
    finally:
        os.close(directory)


def write_in(directory: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """:func:`write` of ``name`` in the checked directory ``directory`` (a descriptor)."""
    temporary = f".{name}.{secrets.token_hex(6)}{TEMPORARY_SUFFIX}"
    descriptor = os.open(temporary, _WRITE_FLAGS, mode, dir_fd=directory)
    try:
        try:
            os.fchmod(descriptor, mode)  # the umask may have removed bits; the file never had more than mode
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        raise
    os.fsync(directory)


def open_append(directory: int, name: str, kind: FileKind) -> int:
    """A descriptor that appends to the regular file ``name`` in the checked ``directory`` (never through a symbolic
    link; private to this user if ``kind`` says so), for a log its one writer extends; OSError (``strerror`` in
    words) otherwise. The file must exist (made by :func:`write_in`, with its final mode)."""
    descriptor = _open(name, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, directory, False)
    try:
        status = _regular(descriptor)
        if kind.private:
            _check_private(name, kind, status)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def remove_leftovers(directory: int, name: str, older_than: float = 0.0) -> int:
    """Delete the temporary files writers of ``name`` left in ``directory`` (a kill -9 during a write) that are more
    than ``older_than`` seconds old; return how many. 0 only where one writer owns the directory (it holds its
    lock): a write in flight takes milliseconds, so :data:`LEFTOVER_AGE` leaves another writer's alone."""
    removed, now = 0, time.time()
    for entry in os.listdir(directory):
        if not (entry.startswith(f".{name}.") and entry.endswith(TEMPORARY_SUFFIX)):
            continue
        with contextlib.suppress(FileNotFoundError):
            if older_than and now - os.stat(entry, dir_fd=directory, follow_symlinks=False).st_mtime < older_than:
                continue
            os.unlink(entry, dir_fd=directory)
            removed += 1
    return removed


def set_aside(directory: int, name: str, stamp: str) -> str:
    """Rename ``name`` in ``directory`` to ``NAME.unusable-STAMP`` (kept for the operator); return the new name."""
    taken, aside = set(os.listdir(directory)), f"{name}.unusable-{stamp}"
    for number in range(1, len(taken) + 2):
        if aside not in taken:
            break
        aside = f"{name}.unusable-{stamp}-{number}"
    os.replace(name, aside, src_dir_fd=directory, dst_dir_fd=directory)
    os.fsync(directory)
    return aside


def lock(directory: int, name: str) -> int | None:
    """Take the lock file ``name`` in ``directory`` (made private if missing, never through a symbolic link); its
    descriptor, held until closed (the kernel releases it when the process ends), or None if another holds it."""
    try:
        descriptor = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=directory)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _refused(errno.ELOOP, "a symbolic link (refused here)") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise _refused(errno.EINVAL, "not a regular file")
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def temporary_directory(prefix: str) -> str:
    """A new directory only this user may enter (mode 0700, ``tempfile.mkdtemp``'s), for sockets of this process."""
    return tempfile.mkdtemp(prefix=prefix)


def discard(descriptor: int) -> None:
    """Point ``descriptor`` (stdout whose reader went away) at ``/dev/null``, so that writes to it succeed."""
    null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.dup2(null, descriptor)
    finally:
        os.close(null)
