"""CURVE keys in ZeroMQ certificate files.

This module owns the key files: making a key pair (:func:`keygen`: ``NAME.key`` holds the public key,
``NAME.key_secret`` both, in pyzmq's certificate format), loading a secret certificate, loading a directory of
public certificates as an allowlist, and reading a broker's public key given as Z85 text or as a certificate file
(:func:`server_key`). A public certificate may carry metadata; ``services`` (comma-separated shell-style
patterns, e.g. ``services = "echo,report.*"``) limits the services a worker key may register for.

Files go through :mod:`generaldomo.io.files`: a secret certificate is written with mode 0600 from its creation
(never through a link planted at its name), and read only if it is a regular file of this user or root (one
others may read or write is used with a warning naming it); a certificate's keys must be valid Z85 of 32 bytes
(a :class:`KeyFileError` names the file otherwise). An allowlist directory that every user may write to is
refused (anyone could add a key), one its group may write to or of another user is used with a warning. It
knows nothing of roles beyond reading that field, nor of sockets.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

import zmq
import zmq.utils.z85

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.io import files

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["KeyFileError"])

__all__ = ["keygen", "load_public", "load_secret"]

log = logging.getLogger(__name__)

_METADATA_LINE = re.compile(r'^\s+([A-Za-z0-9_.-]+)\s*=\s*"?(.*?)"?\s*$')
_KEY_LINE = re.compile(r'^\s+(public-key|secret-key)\s*=\s*"?(.*?)"?\s*$')
CERTIFICATE_BYTES = 64 * 1024  # a certificate is a few hundred bytes
PUBLIC = files.FileKind("CURVE certificate", CERTIFICATE_BYTES)
SECRET = files.FileKind("CURVE secret key file", CERTIFICATE_BYTES, private=True)
KEY_BYTES = 32


def keygen(
    directory: str | os.PathLike[str], name: str, metadata: Mapping[str, str] | None = None
) -> tuple[Path, Path]:
    """Make a key pair as ``DIRECTORY/NAME.key`` (public) and ``NAME.key_secret`` (secret, mode 0600).

    Args:
        directory: the folder (made private, mode 0700, if missing).
        name: the file names' stem.
        metadata: extra ``key = value`` lines (``services`` for a worker's allowed services).

    Example:
        >>> import tempfile
        >>> from generaldomo.io.keys import keygen, load_public, load_secret
        >>> folder = tempfile.mkdtemp()
        >>> public_file, secret_file = keygen(folder, "alice")
        >>> load_public(public_file) == load_secret(secret_file)[0]
        True
    """
    folder = Path(directory)
    files.make_directory(folder, 0o700)
    public, secret = zmq.curve_keypair()
    public_file, secret_file = folder / f"{name}.key", folder / f"{name}.key_secret"
    files.write(secret_file, certificate(public, secret, metadata), "CURVE secret key file", 0o600)
    files.write(public_file, certificate(public, None, metadata), "CURVE certificate", 0o644)
    return public_file, secret_file


def certificate(public: bytes, secret: bytes | None, metadata: Mapping[str, str] | None = None) -> bytes:
    """A certificate file's text (pyzmq's format): the public key, and the secret one in a secret certificate."""
    made = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [f"#   ****  Generated on {made} by generaldomo  ****"]
    if secret is None:
        lines += [
            "#   ZeroMQ CURVE Public Certificate",
            "#   Exchange securely, or use a secure mechanism to verify the contents",
        ]
    else:
        lines += [
            "#   ZeroMQ CURVE **Secret** Certificate",
            "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.",
        ]
    lines += ["", "metadata"]
    lines += [f'    {key} = "{value}"' for key, value in (metadata or {}).items()]
    lines += ["curve", f'    public-key = "{public.decode("ascii")}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode("ascii")}"')
    return ("\n".join(lines) + "\n").encode()


def _read(path: str | os.PathLike[str], kind: files.FileKind) -> str:
    try:
        return files.read(path, kind).decode("utf-8")
    except OSError as error:
        raise errors.KeyFileError(f"cannot load the {kind.what} {path}: {error.strerror or error}") from error
    except UnicodeDecodeError:
        raise errors.KeyFileError(f"{path} is not a certificate file (not UTF-8 text)") from None


def _keys(path: str | os.PathLike[str], text: str) -> dict[str, bytes]:
    """The ``curve`` section's keys of a certificate's ``text``, each checked: Z85 text of 32 bytes."""
    found: dict[str, bytes] = {}
    section = ""
    for line in text.splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            section = line.strip()
        elif section == "curve" and (match := _KEY_LINE.match(line)):
            value = match[2].encode("ascii", "replace")
            try:
                valid = len(value) == 40 and len(zmq.utils.z85.decode(value)) == KEY_BYTES
            except (ValueError, KeyError, IndexError, TypeError):
                valid = False
            if not valid:
                raise errors.KeyFileError(f"{path}: its {match[1]} is not a CURVE key (40 characters of Z85 text)")
            found[match[1]] = value
    if "public-key" not in found:
        raise errors.KeyFileError(f"{path} is not a CURVE certificate (no public-key in a curve section)")
    return found


def load_secret(path: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """``(public, secret)`` Z85 keys from a secret certificate file (``*.key_secret``).

    Args:
        path: a ``NAME.key_secret`` certificate.

    Example::

        client = Client(endpoint, server_key=load_public("keys/broker.key"), keys=load_secret("keys/alice.key_secret"))
    """
    found = _keys(path, _read(path, SECRET))
    if "secret-key" not in found:
        raise errors.KeyFileError(f"{path} holds no secret key (use the .key_secret file)")
    public, secret = found["public-key"], found["secret-key"]
    if zmq.curve_public(secret) != public:
        raise errors.KeyFileError(f"{path}: its public-key is not the one of its secret-key")
    return public, secret


def load_public(path: str | os.PathLike[str]) -> bytes:
    """The Z85 public key of a certificate file (public or secret).

    Args:
        path: a ``NAME.key`` (or ``NAME.key_secret``) certificate.

    Example::

        server_key = load_public("keys/broker.key")
    """
    return _keys(path, _read(path, PUBLIC))["public-key"]


def metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The ``metadata`` section of a certificate file."""
    found: dict[str, str] = {}
    section = ""
    for line in _read(path, PUBLIC).splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            section = line.strip()
        elif section == "metadata" and (match := _METADATA_LINE.match(line)):
            found[match[1]] = match[2]
    return found


def load_allowlist(directory: str | os.PathLike[str]) -> dict[str, tuple[str, ...]]:
    """Every public certificate (``*.key``) in ``directory``: Z85 key text -> its ``services`` patterns."""
    root = Path(directory)
    if not root.is_dir():
        raise errors.KeyFileError(f"{directory} is not a directory of public certificates")
    _check_allowlist(root)
    keys: dict[str, tuple[str, ...]] = {}
    for path in sorted(root.glob("*.key")):
        services = metadata(path).get("services", "")
        keys[load_public(path).decode("ascii")] = tuple(p.strip() for p in services.split(",") if p.strip())
    return keys


def _check_allowlist(root: Path) -> None:
    """Refuse an allowlist directory every user may write to; warn of one its group may, or of another user."""
    status = root.stat()
    mode = stat.S_IMODE(status.st_mode)
    if mode & stat.S_IWOTH:
        raise errors.KeyFileError(
            f"the allowlist directory {root} is writable by every user (mode {mode:04o}): anyone "
            "could add a key; chmod o-w it"
        )
    if mode & stat.S_IWGRP:
        log.warning(
            "the allowlist directory %s is writable by its group (mode %04o): its members can add keys", root, mode
        )
    if status.st_uid not in (os.geteuid(), 0):
        log.warning(
            "the allowlist directory %s belongs to another user (uid %d), who can add keys", root, status.st_uid
        )


def server_key(value: str) -> bytes:
    """A broker's public key given as 40 characters of Z85 text, or as the path of a certificate file holding it."""
    text = value.strip()
    if len(text) == 40 and not Path(text).exists():
        try:
            zmq.utils.z85.decode(text.encode("ascii"))
        except (ValueError, UnicodeEncodeError, KeyError) as error:
            raise errors.KeyFileError(f"{value!r} is neither a Z85 public key nor a certificate file") from error
        return text.encode("ascii")
    if not Path(text).is_file():
        raise errors.KeyFileError(f"{value!r} is neither a Z85 public key (40 characters) nor a certificate file")
    return load_public(text)
