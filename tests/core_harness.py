"""A sans-IO broker core with a fake clock and an inbox per peer, for the core's tests."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Iterator

from worker_commands import parse_worker_command

from generaldomo.sansio.broker.actions import Beat, Cancel, Dismiss, Dispatch, Forward, Respond, Send
from generaldomo.sansio.broker.core import BrokerCore, Peer, Settings
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect

# the kind of action each command the broker sends is (a REQUEST+FIELDS is a task too)
_KINDS: dict[str, type[Send]] = {
    protocol.REQUEST: Dispatch, protocol.FIELDS_REQUEST: Dispatch, protocol.CANCEL: Cancel, protocol.HEARTBEAT: Beat,
    protocol.DISCONNECT: Dismiss, protocol.FINAL: Respond, protocol.PARTIAL: Forward,
}  # fmt: skip


def kind_of(frames: list[bytes]) -> type[Send]:
    """The kind of action that a message of ``frames`` from the broker is, read as its peer reads it: the
    dialect's header (which also says whether it goes to a worker), then the command byte."""
    empty = frames[0] == b""
    dialect, to_worker = protocol.HEADERS[empty, bytes(frames[int(empty)])]
    if dialect is Dialect.MDP01 and not to_worker:
        return Respond  # an MDP/0.1 client reply has no command byte: always final
    table = (protocol.WORKER_COMMANDS if to_worker else protocol.CLIENT_COMMANDS)[dialect]
    command = bytes(frames[len(protocol.PREFIX[dialect, to_worker])])
    return _KINDS[next(name for name, code in table.items() if code.to_bytes(1, "big") == command)]


def checked(out: Iterable[Send]) -> Iterator[Send]:
    """The core's actions, each checked to be of the kind its frames say it is."""
    for action in out:
        assert type(action) is kind_of(action.frames), f"{type(action).__name__} of {action.frames[:3]!r}"
        yield action


class Harness:
    """A core plus the inbox of every peer, in the order messages were sent."""

    def __init__(
        self, *, handover_key: bytes | None = None, instance: bytes = b"test", recovering: bool = False,
        seed: int = 0, **settings: float,
    ) -> None:  # fmt: skip
        self.core = BrokerCore(
            settings=Settings(**settings),  # type: ignore[arg-type]
            instance=instance,
            random=random.Random(seed).randbytes,
            handover_key=handover_key,
            recovering=recovering,
        )
        self.inbox: dict[Peer, list[list[bytes]]] = defaultdict(list)
        self.now = 0.0

    def feed(self, peer: Peer, frames: list[bytes]) -> None:
        for to, out in checked(self.core.receive(peer, frames, self.now)):
            self.inbox[to].append(out)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for to, out in checked(self.core.tick(self.now)):
            self.inbox[to].append(out)

    def request(self, client: Peer, rid: bytes, service: bytes = b"echo", body: bytes = b"") -> None:
        self.feed(client, protocol.gdp_request(rid, service, [body or rid]))

    def ready(self, worker: Peer, service: bytes = b"echo") -> None:
        self.feed(worker, protocol.gdp_ready(service))

    def tasks_of(self, worker: Peer) -> list[tuple[bytes, bytes, tuple[bytes, ...]]]:
        """(task id, description, body) of each REQUEST the worker got, in order."""
        return [
            (args[0], args[1], args[2:])
            for parsed in map(parse_worker_command, self.inbox[worker])
            if parsed and parsed[0] == protocol.REQUEST
            for args in [parsed[1]]
        ]

    def answer(self, worker: Peer, task_id: bytes, body: bytes, service: bytes = b"echo") -> None:
        self.feed(worker, protocol.gdp_ready(service, (task_id, protocol.OK, [body])))

    def replies_of(self, client: Peer) -> list[tuple[bytes, bytes | None, tuple[bytes, ...]]]:
        """(request id, status, body) of each generaldomo reply the client got; timings left out."""
        parsed = [p for p in map(protocol.parse_client_reply, self.inbox[client]) if p is not None]
        return [(rid, status, body) for rid, status, _, body in parsed]


def client(n: int) -> Peer:
    return Peer(0, b"client-%d" % n)


def worker(n: int) -> Peer:
    return Peer(1, n)
