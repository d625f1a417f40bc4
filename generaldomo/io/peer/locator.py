"""Where a peer's broker is, and where it looks when the broker goes silent or moves: peers follow the broker.

This module owns the rules by which a Client or Worker finds its broker again after a restart:

- *Endpoints* (``Client(["tcp://a:5555", "tcp://b:5555"])``, ``--connect A --connect B``): the first one, and
  on silence the next, in turn (for a replacement broker started elsewhere). A host name in an endpoint is
  resolved by libzmq again at every connection attempt (``tcp_connecter_t::open`` resolves the address each
  time), so a name that moved to another address is followed without anything here.
- *An address file* (``--broker-file``, ``GENERALDOMO_BROKER_FILE``, see :mod:`generaldomo.io.address_file`):
  waited for at start; looked at again (``stat``, every :data:`FILE_LOOK` seconds) while the peer runs, and
  read again when it changed (a restarted broker wrote its new endpoints) or the broker went silent; a file
  that is gone or unreadable leaves the peer where it is.
- *A beacon* (``--discover``): heard at start; when the broker goes silent, a thread listens again (up to the
  find timeout, without holding the peer up), and the peer moves to the endpoint the next beacon (of that
  name) announces.

With ``trust_announced_key`` (``--trust-announced-key``) the broker key the file or beacon announces comes with
each new endpoint. What a file or beacon names is only a candidate: a peer that moved there and found no broker
that completes the handshake (under CURVE with a pinned key: one that proves it holds that key) goes back to its
last good broker when the candidate is silent, and listens again from there; endpoints a file or beacon names are
checked first (:func:`generaldomo.io.endpoints.announced`), so a bad one is never adopted.

:class:`Where` is the picklable description (it travels to process pools); :class:`Locator` is the live one of
a peer. It knows nothing of the protocol; the peers' sessions decide when to reconnect, this says where to.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Final

import attrs

from generaldomo.errors import DiscoveryError
from generaldomo.io import address_file
from generaldomo.io.beacon import BROKER_VARIABLE, Announcement, Listener
from generaldomo.io.transport import Transport

__all__ = ["FILE_LOOK", "FIND_TIMEOUT", "Locator", "Place", "Target", "Where"]

log = logging.getLogger(__name__)

FILE_LOOK: Final = 1.0  # seconds between two looks at an address file
FIND_TIMEOUT: Final = 5.0  # seconds a peer waits for the file or a beacon at start, unless told
_LISTEN: Final = 1.0  # seconds one wait of the beacon thread lasts (it checks whether it is still wanted)
_BEACON_LOOK: Final = 0.2  # seconds between looks at what a beacon listened for after a silence said


@attrs.frozen
class Target:
    """An endpoint to connect to, and the broker key that came with it (None: the peer's own CURVE setting)."""

    endpoint: str
    server_key: bytes | None = None


@attrs.frozen
class Where:
    """Where a peer looks for its broker: ``endpoints`` in turn, else the address file ``broker_file``, else a
    ``beacon`` (of the broker ``name``, if given); ``timeout``: how long to wait for the file or a beacon at
    start; ``trust_announced_key``: take the key the file or beacon announces.

    Example::

        from generaldomo import Client, Where

        client = Client(Where(broker_file="/shared/broker.json", timeout=30))  # follows the file
        other = Client(["tcp://node1:5555", "tcp://node2:5555"])  # the same as Where(("tcp://node1:5555", ...))
    """

    endpoints: tuple[str, ...] = ()
    broker_file: str | None = None
    beacon: bool = False
    name: str | None = None
    timeout: float = FIND_TIMEOUT
    trust_announced_key: bool = False

    @classmethod
    def of(cls, endpoint: str | Sequence[str] | Where | None, timeout: float = FIND_TIMEOUT) -> Where:
        """The Where of ``endpoint`` (one endpoint, several, or a Where already; None: ``GENERALDOMO_BROKER``,
        else ``GENERALDOMO_BROKER_FILE``, else a beacon: the order of :func:`generaldomo.io.beacon.find_broker`),
        waiting up to ``timeout`` seconds for the file or beacon at start."""
        if isinstance(endpoint, Where):
            return endpoint
        if isinstance(endpoint, str):
            return cls((endpoint,), timeout=timeout)
        if endpoint is not None:
            endpoints = tuple(endpoint)
            if not endpoints or not all(isinstance(e, str) for e in endpoints):
                raise ValueError(f"endpoints must be one or more strings, not {endpoint!r}")
            return cls(endpoints, timeout=timeout)
        from_environment = os.environ.get(BROKER_VARIABLE)
        if from_environment:
            return cls((from_environment,), timeout=timeout)
        broker_file = os.environ.get(address_file.BROKER_FILE_VARIABLE)
        if broker_file:
            return cls(broker_file=broker_file, timeout=timeout)
        return cls(beacon=True, timeout=timeout)


Place = str | Sequence[str] | Where  # what a Client or Worker is told of where its broker is


class Locator:
    """The live :class:`Where` of one peer: :attr:`target` now, :meth:`advance` on silence, :meth:`moved` when
    the address file says the broker is elsewhere. Finding the first target may wait up to ``where.timeout``
    (``DiscoveryError`` if nothing is found)."""

    def __init__(self, where: Where, transport: str | Transport) -> None:
        self.where = where
        self.transport = Transport.of(transport)
        self._next = 0  # the endpoint tried next on silence
        self._stamp: tuple[int, int, int] | None = None  # the address file's (inode, size, mtime) when read
        self._looked = time.monotonic()
        self._listening = False  # a thread listens for a beacon (after a silence)
        self._pending: Announcement | None = None  # what it heard, for the next look
        self._good: Target | None = None  # the last target whose broker completed a handshake
        self.target = self._first()

    # ------------------------------------------------------------------------------------------ the start

    def _first(self) -> Target:
        where = self.where
        if where.endpoints:
            self._next = 1 % len(where.endpoints)
            return Target(where.endpoints[0])
        if where.broker_file is not None:
            try:
                address = address_file.wait(where.broker_file, where.timeout, self.transport.value)
                self._stamp = _stamp(where.broker_file)
                return self._from_address(address)
            except (TimeoutError, LookupError) as error:
                raise DiscoveryError(str(error)) from error
        beacons = _Beacons.join(where.name)
        deadline = time.monotonic() + where.timeout
        try:
            heard = beacons.wait(where.timeout, where.name)
            while True:
                try:
                    return self._from_announcement(heard)
                except DiscoveryError:  # no usable endpoint of this transport: wait for a beacon that has one
                    if time.monotonic() >= deadline:
                        raise
                    heard = beacons.wait(max(0.0, deadline - time.monotonic()), where.name, fresh=True)
        finally:
            beacons.leave(where.name)

    def _from_address(self, address: address_file.BrokerAddress) -> Target:
        key = address.public_key if self.where.trust_announced_key else None
        return Target(address.endpoint(self.transport), None if key is None else key.encode("ascii"))

    def _from_announcement(self, heard: Announcement) -> Target:
        key = heard.public_key if self.where.trust_announced_key else None
        return Target(heard.endpoint(self.transport), None if key is None else key.encode("ascii"))

    # ------------------------------------------------------------------------------------------ following

    @property
    def next_look(self) -> float | None:
        """When :meth:`moved` next has something to look at (None: nothing to look at: fixed endpoints, or a
        beacon not being listened for)."""
        if self.where.broker_file is not None:
            return self._looked + FILE_LOOK
        if self._listening or self._pending is not None:
            return time.monotonic() + _BEACON_LOOK
        return None

    def moved(self, now: float) -> bool:
        """True (and :attr:`target` changed) when the address file changed since the last look and names
        another endpoint (or key), looking at most every :data:`FILE_LOOK` seconds; or when the beacon listened
        for after a silence names another endpoint."""
        heard, self._pending = self._pending, None
        if heard is not None:
            try:
                return self._move(self._from_announcement(heard), f"broker {heard.name!r} announces")
            except DiscoveryError:
                return False  # it lists no endpoint of this transport: stay
        path = self.where.broker_file
        if path is None or now < self._looked + FILE_LOOK:
            return False
        self._looked = now
        stamp = _stamp(path)
        if stamp is None or stamp == self._stamp:
            return False
        return self._reread(stamp, "the broker address file changed")

    def left(self, proven: bool) -> None:
        """The peer leaves :attr:`target` (to reconnect); ``proven``: the broker there completed a handshake (under
        CURVE: proved it holds the key the peer pinned), which makes it the last good broker."""
        if proven:
            self._good = self.target

    def advance(self, proven: bool = True) -> Target:
        """Where to connect after the broker went silent: the next endpoint, what the address file says now, or
        the latest beacon's endpoint (the same one when nothing says otherwise). ``proven``: as :meth:`left`; a
        target the address file or a beacon named that never proved itself is given up for the last good broker
        (so a spoofed endpoint cannot keep a peer away from its broker)."""
        self.left(proven)
        where = self.where
        good = self._good
        if not where.endpoints and not proven and good is not None and self.target != good:
            log.warning("%s never completed a handshake; back to %s", self.target.endpoint, good.endpoint)
            self.target = good
            self._stamp = None if where.broker_file is None else _stamp(where.broker_file)
            return self.target
        if where.endpoints:
            self.target = Target(where.endpoints[self._next])
            self._next = (self._next + 1) % len(where.endpoints)
        elif where.broker_file is not None:
            self._reread(_stamp(where.broker_file), "the broker is silent; its address file says")
        elif where.beacon and not self._listening:  # listen again, without holding the peer up meanwhile
            self._listening = True
            threading.Thread(target=self._listen_again, name="generaldomo-beacon-listener", daemon=True).start()
        return self.target

    def _listen_again(self) -> None:
        """Hear the next beacon (up to ``where.timeout``) for :meth:`moved`."""
        beacons = _Beacons.join(self.where.name)
        try:
            self._pending = beacons.wait(self.where.timeout, self.where.name, fresh=True)
        except DiscoveryError:
            log.debug("heard no beacon after the broker went silent; staying at %s", self.target.endpoint)
        finally:
            beacons.leave(self.where.name)
            self._listening = False

    def _reread(self, stamp: tuple[int, int, int] | None, why: str) -> bool:
        assert self.where.broker_file is not None
        try:
            found = self._from_address(address_file.read(self.where.broker_file))
        except (OSError, ValueError, LookupError) as error:
            log.debug("broker address file %s unusable now (%s); staying at %s", self.where.broker_file, error,
                      self.target.endpoint)  # fmt: skip
            return False
        self._stamp = stamp
        return self._move(found, why)

    def _move(self, found: Target, why: str) -> bool:
        if found == self.target:
            return False
        log.info("%s: %s (was %s)", why, found.endpoint, self.target.endpoint)
        self.target = found
        return True

    def close(self) -> None:
        """Nothing to release: a beacon listened for after a silence is heard by a thread that ends by itself
        within ``where.timeout``."""


class _Beacons:
    """The beacon listener of this process (one per UDP port and address), open while a peer listens: peers of
    one process that listen at the same time share it, so that they never take each other's datagrams (the
    kernel hands a unicast datagram to one of the sockets bound to its port; peers of several processes on one
    host listening at once can, which the broadcast default avoids). A thread keeps the latest announcement of
    each name a peer listens for (and of any name, if one listens for any), and nothing else: however many names
    beacons bring, it holds one datagram's worth per name listened for."""

    _shared: dict[tuple[str, str], _Beacons] = {}
    _lock = threading.Lock()

    def __init__(self, key: tuple[str, str]) -> None:
        self._key = key
        self._listener = Listener()
        self._users: dict[str | None, int] = {}  # the names listened for (None: any), by how many peers
        self._heard: dict[str | None, Announcement] = {}  # the latest by name listened for (None: of any name)
        self._news = threading.Condition(threading.Lock())
        self._stop = threading.Event()
        threading.Thread(target=self._listen, name="generaldomo-beacon-listener", daemon=True).start()

    @classmethod
    def join(cls, name: str | None) -> _Beacons:
        """The process's listener, listening for broker ``name`` (None: any) until :meth:`leave`."""
        key = (os.environ.get("GENERALDOMO_BEACON_PORT", ""), os.environ.get("GENERALDOMO_BEACON_BIND", ""))
        with cls._lock:
            beacons = cls._shared.get(key)
            if beacons is None:
                beacons = cls._shared[key] = cls(key)
            with beacons._news:
                beacons._users[name] = beacons._users.get(name, 0) + 1
            return beacons

    def leave(self, name: str | None) -> None:
        with self._lock, self._news:
            self._users[name] -= 1
            if not self._users[name]:
                del self._users[name]
                self._heard.pop(name, None)
            if not self._users:
                del self._shared[self._key]
                self._stop.set()

    def wait(self, timeout: float, name: str | None, fresh: bool = False) -> Announcement:
        """An announcement of broker ``name`` (any: None): the latest (``fresh``: the next) heard, waiting up to
        ``timeout`` seconds for one."""
        with self._news:
            if fresh:
                self._heard.pop(name, None)
            if not self._news.wait_for(lambda: name in self._heard, timeout):
                wanted = f"broker {name!r}" if name else "a broker"
                raise DiscoveryError(
                    f"heard no beacon from {wanted} on UDP port {self._listener.port} within {timeout} s"
                )
            return self._heard[name]

    def _listen(self) -> None:
        listener = self._listener
        try:
            while not self._stop.is_set():
                try:
                    heard = listener.wait(_LISTEN)
                except DiscoveryError:
                    continue  # nothing within the wait: listen on
                with self._news:  # kept only for a name listened for: what beacons leave here is bounded
                    for name in (None, heard.name):
                        if name in self._users:
                            self._heard[name] = heard
                    self._news.notify_all()
        finally:
            listener.close()


def _stamp(path: str) -> tuple[int, int, int] | None:
    """What tells a file's versions apart: inode (a rename makes a new one), size and modification time."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_ino, status.st_size, status.st_mtime_ns
