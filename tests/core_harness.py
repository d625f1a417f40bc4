"""A sans-IO broker core with a fake clock and an inbox per peer, for the core's tests."""

from __future__ import annotations

import random
from collections import defaultdict

from generaldomo.sansio import protocol
from generaldomo.sansio.core import BrokerCore, Peer, Settings


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
        for to, out in self.core.receive(peer, frames, self.now):
            self.inbox[to].append(out)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for to, out in self.core.tick(self.now):
            self.inbox[to].append(out)

    def request(self, client: Peer, rid: bytes, service: bytes = b"echo", body: bytes = b"") -> None:
        self.feed(client, protocol.gdp_request(rid, service, [body or rid]))

    def ready(self, worker: Peer, service: bytes = b"echo") -> None:
        self.feed(worker, protocol.gdp_ready(service))

    def tasks_of(self, worker: Peer) -> list[tuple[bytes, bytes, tuple[bytes, ...]]]:
        """(task id, description, body) of each REQUEST the worker got, in order."""
        return [
            (args[0], args[1], args[2:])
            for parsed in map(protocol.parse_worker_command, self.inbox[worker])
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
