"""Discovery by address file: a broker writes where it listens; peers on a shared filesystem read it.

This module owns the file's layout and its life: written whole or not at all (a temporary file in the same
directory, then a rename), removed when the broker leaves (only if it is still the one this broker wrote), and
waited for by peers started before their broker. It knows nothing of the broker or of the beacon.

The file is UTF-8 JSON::

    {"version": 1, "name": "generaldomo", "instance": "9f3c01aa", "host": "node17", "pid": 4242,
     "endpoints": [{"transport": "router", "endpoint": "tcp://10.0.0.5:5555"}], "public_key": null}

``endpoints`` are concrete (no wildcard address, no ``inproc://``); ``public_key`` is the broker's CURVE
public key (Z85 text) once it has one, else null. Readers ignore fields they do not know, and endpoints that are
not well-formed ``tcp://`` or ``ipc://`` ones (counted, logged rate limited: a bad one is never used).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

import attrs

from generaldomo.io import files
from generaldomo.io.endpoints import announced, announced_key
from generaldomo.sansio.wire import wirejson

__all__ = [
    "BROKER_FILE_VARIABLE",
    "KIND",
    "VERSION",
    "BrokerAddress",
    "Published",
    "decode",
    "encode",
    "read",
    "wait",
    "write",
]

log = logging.getLogger(__name__)

VERSION = 1
BROKER_FILE_VARIABLE = "GENERALDOMO_BROKER_FILE"
KIND = files.FileKind("broker address file", 4 * 1024 * 1024)  # hundreds of bytes; thousands of endpoints fit
_POLL = 0.1  # seconds between looks for a file that is not there yet


@attrs.frozen
class BrokerAddress:
    """What an address file says."""

    name: str
    instance: str
    endpoints: tuple[tuple[str, str], ...]
    host: str = ""
    pid: int = 0
    public_key: str | None = None

    def endpoint(self, transport: str) -> str:
        """The first endpoint of ``transport``; LookupError naming what there is instead."""
        for kind, endpoint in self.endpoints:
            if kind == transport:
                return endpoint
        listed = ", ".join(f"{kind} {endpoint}" for kind, endpoint in self.endpoints) or "nothing"
        raise LookupError(f"broker {self.name!r} lists no {transport} endpoint (it lists {listed})")


def encode(address: BrokerAddress) -> bytes:
    body = {
        "version": VERSION,
        "name": address.name,
        "instance": address.instance,
        "host": address.host,
        "pid": address.pid,
        "endpoints": [{"transport": t, "endpoint": e} for t, e in address.endpoints],
        "public_key": address.public_key,
    }
    return json.dumps(body, indent=2).encode() + b"\n"


def decode(data: bytes) -> BrokerAddress:
    """The address in ``data``; ValueError if it is not an address file of a version this code reads."""
    try:
        body: dict[str, Any] = wirejson.loads(data, None)
        if body.get("version") != VERSION:
            raise ValueError(f"address file version {body.get('version')!r}, not {VERSION}")
        endpoints = announced(body["endpoints"], "the broker address file")
        key = announced_key(body.get("public_key"), "the broker address file")
        return BrokerAddress(
            str(body["name"]),
            str(body["instance"]),
            endpoints,
            str(body.get("host", "")),
            int(body.get("pid", 0)),
            key,
        )
    except (KeyError, TypeError, AttributeError, OverflowError) as error:
        raise ValueError(f"not a broker address file: {error!r}") from error


def write(path: str | os.PathLike[str], address: BrokerAddress) -> None:
    """Write ``address`` to ``path`` atomically: readers see the old file, no file, or all of the new one."""
    files.write(path, encode(address), "broker address file", 0o600)
    log.debug("wrote broker address file %s", path)


def read(path: str | os.PathLike[str]) -> BrokerAddress:
    """The address in the file at ``path`` (OSError if unreadable, ValueError if malformed)."""
    return decode(files.read(path, KIND))


def wait(path: str | os.PathLike[str], timeout: float, transport: str | None = None) -> BrokerAddress:
    """The address in the file at ``path``, waiting up to ``timeout`` seconds for it to appear (and, with
    ``transport``, to name an endpoint of it: a file without one is waited past as a missing one is)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            address = read(path)
            if transport is not None:
                address.endpoint(transport)  # LookupError: none (or none usable) yet
            return address
        except (OSError, ValueError, LookupError) as error:
            if time.monotonic() >= deadline:
                raise TimeoutError(_why(os.fspath(path), timeout, error)) from error
        time.sleep(_POLL)


def _why(path: str, timeout: float, error: Exception) -> str:
    if isinstance(error, FileNotFoundError):
        return f"no broker address file appeared at {path} within {timeout} s"
    return f"broker address file {path} still unusable after {timeout} s: {error}"


class Published:
    """Context manager: the address file exists at ``path`` while the ``with`` block runs."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        name: str,
        instance: str,
        endpoints: list[tuple[str, str]],
        public_key: str | None = None,
    ) -> None:
        """``public_key``: the broker's CURVE public key (Z85 text), announced for peers that choose to trust it."""
        self.path = Path(path)
        host, pid = socket.gethostname(), os.getpid()
        self.address = BrokerAddress(name, instance, tuple(endpoints), host, pid, public_key)

    def __enter__(self) -> Published:
        write(self.path, self.address)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def remove(self) -> None:
        """Remove the file, unless another broker has replaced it since."""
        try:
            if read(self.path).instance != self.address.instance:
                log.info("address file %s now names another broker; left in place", self.path)
                return
            self.path.unlink()
        except (OSError, ValueError):
            return
        log.debug("removed broker address file %s", self.path)
