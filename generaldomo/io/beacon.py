"""Discovery: a broker announces its endpoints by UDP beacon; clients and workers find it.

This module owns the beacon datagram and the order in which a peer finds its broker (:func:`find_broker`):

1. an explicit endpoint;
2. the ``GENERALDOMO_BROKER`` environment variable;
3. a broker address file (given, else ``GENERALDOMO_BROKER_FILE``), waited for up to the timeout
   (see :mod:`generaldomo.io.address_file`);
4. a beacon, heard within the timeout.

It knows nothing of the broker's protocol or state.

A beacon is one UDP datagram: the magic bytes ``GDBEACON``, a version byte (1), then UTF-8 JSON
``{"name": ..., "instance": ..., "endpoints": [{"transport": "router", "endpoint": "tcp://10.0.0.5:5555"}],
"public_key": ...}``; an endpoint that is not a well-formed ``tcp://`` or ``ipc://`` one is ignored (counted,
logged rate limited: :func:`generaldomo.io.endpoints.announced`), so a spoofed beacon cannot make a peer use
it; ``public_key`` (a CURVE broker's public key, Z85 text; absent or null without CURVE) is
never a secret, and peers use it only when told to trust it (:func:`locate` reports it, nothing more).
Wildcard binds (``tcp://*:5555``, ``tcp://0.0.0.0:5555``) are announced with the address of the interface
that faces the beacon's destination; ``inproc://`` endpoints, reachable only inside the broker's process,
are left out.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Any

import attrs

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.io import address_file
from generaldomo.io.endpoints import announced, announced_key
from generaldomo.sansio.config import knobs
from generaldomo.sansio.wire import wirejson

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["DiscoveryError"])

__all__ = ["Announcement", "discover", "find_broker"]

log = logging.getLogger(__name__)

MAGIC = b"GDBEACON"
VERSION = 1
DEFAULT_PORT = 5670
BROADCAST = "255.255.255.255"
BROKER_VARIABLE = "GENERALDOMO_BROKER"
PORT_VARIABLE = "GENERALDOMO_BEACON_PORT"
_MAX_DATAGRAM = 65507


@attrs.frozen
class Announcement:
    """What one beacon said.

    Args:
        name: the broker's name (``--name``).
        instance: its instance id (hex), new at each start.
        endpoints: ``(transport, endpoint)`` of each endpoint it announces.
        sender: the address the datagram came from.
        public_key: its CURVE public key (Z85), if it uses CURVE.

    Example::

        found = discover(timeout=5)
        found.endpoint("server")  # its first server endpoint
    """

    name: str
    instance: str
    endpoints: tuple[tuple[str, str], ...]
    sender: str
    public_key: str | None = None

    def endpoint(self, transport: str | None = None) -> str:
        """The first announced endpoint of ``transport`` (any transport when None).

        Args:
            transport: ``router`` or ``server``.
        """
        for kind, endpoint in self.endpoints:
            if transport is None or kind == transport:
                return endpoint
        raise errors.DiscoveryError(f"broker {self.name!r} announces no {transport} endpoint")


def encode(name: str, instance: str, endpoints: list[tuple[str, str]], public_key: str | None = None) -> bytes:
    """The beacon datagram."""
    body = {
        "name": name,
        "instance": instance,
        "endpoints": [{"transport": t, "endpoint": e} for t, e in endpoints],
        "public_key": public_key,
    }
    return MAGIC + bytes([VERSION]) + json.dumps(body).encode()


def decode(datagram: bytes, sender: str = "") -> Announcement | None:
    """The announcement in a datagram, or None if it is not a beacon of a version this code reads."""
    if not datagram.startswith(MAGIC) or len(datagram) <= len(MAGIC) or datagram[len(MAGIC)] != VERSION:
        return None
    try:
        body: dict[str, Any] = wirejson.loads(datagram[len(MAGIC) + 1 :], None)
        source = f"a beacon from {sender or 'somewhere'}"
        endpoints = announced(body["endpoints"], source)
        key = announced_key(body.get("public_key"), source)
        return Announcement(str(body["name"]), str(body.get("instance", "")), endpoints, sender, key)
    except (ValueError, KeyError, TypeError):
        return None


def local_address_towards(host: str) -> str:
    """The address of this host's interface that traffic to ``host`` leaves from."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        probe.connect((host, 9))  # UDP connect sends nothing; it only picks a route
        return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        probe.close()


def announceable(endpoints: list[tuple[str, str]], destination: str) -> list[tuple[str, str]]:
    """``endpoints`` as other processes can reach them: wildcards made concrete, inproc left out."""
    result = []
    for transport, endpoint in endpoints:
        if endpoint.startswith("inproc://"):
            continue
        for wildcard in ("tcp://0.0.0.0:", "tcp://*:"):
            if endpoint.startswith(wildcard):
                endpoint = f"tcp://{local_address_towards(destination)}:{endpoint[len(wildcard) :]}"
        result.append((transport, endpoint))
    return result


class Beacon:
    """Sends a broker's announcement every ``interval`` seconds from a daemon thread."""

    def __init__(
        self,
        name: str,
        instance: str,
        endpoints: list[tuple[str, str]],
        destination: str = BROADCAST,
        port: int = DEFAULT_PORT,
        interval: float = 1.0,
        public_key: str | None = None,
    ) -> None:
        self.destination = (destination, knobs.COMMANDS["beacon_port"].check(port))
        self.interval = knobs.COMMANDS["beacon_interval"].check(interval)  # never a flood of datagrams
        self.datagram = encode(name, instance, announceable(endpoints, destination), public_key)
        if len(self.datagram) > _MAX_DATAGRAM:
            raise ValueError("too many endpoints to announce in one datagram")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="generaldomo-beacon", daemon=True)

    def start(self) -> Beacon:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            sender.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            while not self._stop.is_set():
                try:
                    sender.sendto(self.datagram, self.destination)
                except OSError as error:
                    log.warning("beacon to %s:%d failed: %s", *self.destination, error)
                self._stop.wait(self.interval)


class Listener:
    """A UDP socket that hears beacons; ``port=0`` picks a free port (read it from :attr:`port`)."""

    def __init__(self, port: int | None = None, bind: str | None = None) -> None:
        if port is None:
            text = os.environ.get(PORT_VARIABLE, "")
            try:
                port = knobs.COMMANDS["beacon_port"].parse(text) if text else DEFAULT_PORT
            except ValueError as error:
                raise errors.DiscoveryError(f"{PORT_VARIABLE}: {error}") from None
        if bind is None:
            bind = os.environ.get("GENERALDOMO_BEACON_BIND", "")
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):  # several peers on one host may listen at once
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        self.socket.bind((bind, port))
        self.port: int = self.socket.getsockname()[1]

    def wait(self, timeout: float, name: str | None = None, transport: str | None = None) -> Announcement:
        """The first beacon (of broker ``name``, if given; with an endpoint of ``transport``, if given: others are
        passed over) heard within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self.socket.settimeout(left)
            try:
                datagram, (sender, _) = self.socket.recvfrom(_MAX_DATAGRAM)
            except TimeoutError:
                break
            heard = decode(datagram, sender)
            if heard is not None and (name is None or heard.name == name):
                if transport is None or any(kind == transport for kind, _ in heard.endpoints):
                    return heard
        wanted = f"broker {name!r}" if name else "a broker"
        raise errors.DiscoveryError(f"heard no beacon from {wanted} on UDP port {self.port} within {timeout} s")

    def close(self) -> None:
        self.socket.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def discover(
    timeout: float = 5.0,
    name: str | None = None,
    port: int | None = None,
    bind: str | None = None,
    transport: str | None = None,
) -> Announcement:
    """Listen for a broker's beacon (port and bind address default to ``GENERALDOMO_BEACON_PORT`` /
    ``GENERALDOMO_BEACON_BIND``, else 5670 on all interfaces).

    Args:
        timeout: seconds to listen (DiscoveryError after).
        name: only a broker announcing this name (None: any).
        port: the UDP port to listen on.
        bind: the address to listen on.
        transport: only a beacon with an endpoint of this transport (``router``, ``server``; None: any).

    Example::

        announcement = discover(timeout=5, name="prod")
        print(announcement.endpoints, announcement.public_key)
    """
    with Listener(port, bind) as listener:
        return listener.wait(timeout, name, transport)


@attrs.frozen
class Found:
    """Where the broker is, and the public key its address file or beacon announced (None: none, or the
    endpoint was given or came from the environment)."""

    endpoint: str
    public_key: str | None = None


def find_broker(
    transport: str,
    endpoint: str | None = None,
    timeout: float = 5.0,
    name: str | None = None,
    broker_file: str | os.PathLike[str] | None = None,
) -> str:
    """The endpoint to use, found in the order this module's docstring gives; DiscoveryError if none is.

    Args:
        transport: ``router`` or ``server``: which of a broker's endpoints to use.
        endpoint: an explicit endpoint, used as it is (None: look further).
        timeout: seconds to wait for the address file or a beacon.
        name: with a beacon, only a broker announcing this name.
        broker_file: the broker's address file (default: ``GENERALDOMO_BROKER_FILE``).

    Example::

        endpoint = find_broker("router")  # GENERALDOMO_BROKER, the address file, then a beacon
        client = Client(endpoint)
    """
    return locate(transport, endpoint, timeout, name, broker_file).endpoint


def locate(
    transport: str,
    endpoint: str | None = None,
    timeout: float = 5.0,
    name: str | None = None,
    broker_file: str | os.PathLike[str] | None = None,
) -> Found:
    """As :func:`find_broker`, with the public key announced along with the endpoint."""
    if endpoint:
        return Found(endpoint)
    from_environment = os.environ.get(BROKER_VARIABLE)
    if from_environment:
        log.debug("broker endpoint %s from $%s", from_environment, BROKER_VARIABLE)
        return Found(from_environment)
    broker_file = broker_file or os.environ.get(address_file.BROKER_FILE_VARIABLE)
    if broker_file:
        return _from_file(broker_file, transport, timeout)
    heard = discover(timeout, name, transport=transport)
    log.debug("broker %r (instance %s) heard by beacon from %s", heard.name, heard.instance, heard.sender)
    return Found(heard.endpoint(transport), heard.public_key)


def _from_file(path: str | os.PathLike[str], transport: str, timeout: float) -> Found:
    try:
        address = address_file.wait(path, timeout, transport)
        found = address.endpoint(transport)
    except (TimeoutError, LookupError) as error:
        raise errors.DiscoveryError(str(error)) from error
    log.debug("broker %r (instance %s) endpoint %s from address file %s", address.name, address.instance, found, path)
    return Found(found, address.public_key)
