"""CURVE keys in ZeroMQ certificate files.

This module owns the key files: making a key pair (:func:`keygen`, pyzmq's ``zmq.auth.create_certificates``:
``NAME.key`` holds the public key, ``NAME.key_secret`` both), loading a secret certificate, and loading a
directory of public certificates as an allowlist, and reading a broker's public key given as Z85 text or as a
certificate file (:func:`server_key`). A public certificate may carry metadata; ``services``
(comma-separated shell-style patterns, e.g. ``services = "echo,report.*"``) limits the services a worker key
may register for. It knows nothing of roles beyond reading that field, nor of sockets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import zmq.auth
import zmq.utils.z85

from generaldomo.errors import KeyFileError as KeyFileError  # importable from here, as before

__all__ = ["KeyFileError", "keygen", "load_public", "load_secret"]

_METADATA_LINE = re.compile(r'^\s+([A-Za-z0-9_.-]+)\s*=\s*"?(.*?)"?\s*$')


def keygen(
    directory: str | os.PathLike[str], name: str, metadata: Mapping[str, str] | None = None
) -> tuple[Path, Path]:
    """Make a key pair as ``DIRECTORY/NAME.key`` (public) and ``NAME.key_secret`` (secret, mode 0600).

    Args:
        directory: the folder (made if missing).
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
    Path(directory).mkdir(parents=True, exist_ok=True)
    public, secret = zmq.auth.create_certificates(os.fspath(directory), name, dict(metadata or {}))
    os.chmod(secret, 0o600)
    if metadata:  # pyzmq writes metadata into the secret file only; the broker reads the public one
        lines = "".join(f'    {key} = "{value}"\n' for key, value in metadata.items())
        text = Path(public).read_text()
        Path(public).write_text(text.replace("metadata\n", "metadata\n" + lines, 1))
    return Path(public), Path(secret)


def load_secret(path: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """``(public, secret)`` Z85 keys from a secret certificate file (``*.key_secret``).

    Args:
        path: a ``NAME.key_secret`` certificate.

    Example::

        client = Client(endpoint, server_key=load_public("keys/broker.key"), keys=load_secret("keys/alice.key_secret"))
    """
    try:
        public, secret = zmq.auth.load_certificate(os.fspath(path))
    except (OSError, ValueError) as error:
        raise KeyFileError(f"cannot load the CURVE certificate {path}: {error}") from error
    if not secret:
        raise KeyFileError(f"{path} holds no secret key (use the .key_secret file)")
    return public, secret


def load_public(path: str | os.PathLike[str]) -> bytes:
    """The Z85 public key of a certificate file (public or secret).

    Args:
        path: a ``NAME.key`` (or ``NAME.key_secret``) certificate.

    Example::

        server_key = load_public("keys/broker.key")
    """
    try:
        public, _ = zmq.auth.load_certificate(os.fspath(path))
    except (OSError, ValueError) as error:
        raise KeyFileError(f"cannot load the CURVE certificate {path}: {error}") from error
    return public


def metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The ``metadata`` section of a certificate file."""
    found: dict[str, str] = {}
    section = ""
    for line in Path(path).read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            section = line.strip()
        elif section == "metadata" and (match := _METADATA_LINE.match(line)):
            found[match[1]] = match[2]
    return found


def load_allowlist(directory: str | os.PathLike[str]) -> dict[str, tuple[str, ...]]:
    """Every public certificate (``*.key``) in ``directory``: Z85 key text -> its ``services`` patterns."""
    root = Path(directory)
    if not root.is_dir():
        raise KeyFileError(f"{directory} is not a directory of public certificates")
    keys: dict[str, tuple[str, ...]] = {}
    for path in sorted(root.glob("*.key")):
        services = metadata(path).get("services", "")
        keys[load_public(path).decode("ascii")] = tuple(p.strip() for p in services.split(",") if p.strip())
    return keys


def server_key(value: str) -> bytes:
    """A broker's public key given as 40 characters of Z85 text, or as the path of a certificate file holding it."""
    text = value.strip()
    if len(text) == 40 and not Path(text).exists():
        try:
            zmq.utils.z85.decode(text.encode("ascii"))
        except (ValueError, UnicodeEncodeError, KeyError) as error:
            raise KeyFileError(f"{value!r} is neither a Z85 public key nor a certificate file") from error
        return text.encode("ascii")
    if not Path(text).is_file():
        raise KeyFileError(f"{value!r} is neither a Z85 public key (40 characters) nor a certificate file")
    return load_public(text)
