"""The clients of the Ray experiment: Ray tasks that send their share of the requests at scheduled times.

Each client task gets ``(index, when)`` pairs (``when`` on the shared monotonic clock), sends each request at
its time without waiting for earlier ones, and returns one record per request: ``sent``, ``start`` and
``end`` of the work (from the service), ``received``. (a) goes through this process's shared generaldomo
client to the broker, (b) calls the flow-controlled actor. ``probe_*`` measure one request at a time with no
limit in force and no work: the overhead of each path. ``closed_loop`` (through the broker) and ``actor_loop``
(through a flow-controlled actor) keep one call per thread outstanding instead, for a run that a :class:`Gate`
starts once all its tasks run: the clients of the adaptive phases (:mod:`bench.ray_adaptive`) and of part
``shared``'s remote API with a hidden limit.
"""

from __future__ import annotations

import asyncio
import os
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import ray

import generaldomo.ray as gdray
from bench.ray_actor import SPAN, WORK
from generaldomo import Reply

Record = dict[str, float]
T = TypeVar("T")


def _stamp(future: Future[Any]) -> Callable[[float], float]:
    """A function that waits for ``future`` and returns the monotonic time it completed."""
    done = threading.Event()
    when: list[float] = []

    def mark(_: Future[Any]) -> None:
        when.append(time.monotonic())
        done.set()

    future.add_done_callback(mark)

    def received(timeout: float) -> float:
        if not done.wait(timeout):
            raise TimeoutError("no reply in time")
        return when[0]

    return received


def _sleep_until(when: float) -> None:
    time.sleep(max(0.0, when - time.monotonic()))


Sent = list[tuple[int, float, "Future[Any]", Callable[[float], float]]]


def _send(share: list[tuple[int, float]], submit: Callable[[], Future[Any]]) -> Sent:
    """Send each request at its time; remember when it left and how to learn when it came back."""
    sent: Sent = []
    for index, when in share:
        _sleep_until(when)
        start = time.monotonic()
        future = submit()
        sent.append((index, start, future, _stamp(future)))
    return sent


def _collect(sent: Sent, times: Callable[[float, Any], Record], timeout: float) -> list[Record]:
    """One record per request: its index, when it was sent and came back, and ``times`` of its result."""
    return [
        {"index": index, "sent": start, "received": received(timeout), **times(start, future.result(timeout))}
        for index, start, future, received in sent
    ]


def _broker_times(sent: float, reply: Reply) -> Record:
    """The work's span, and when the broker released the request (sent + its time queued in the broker)."""
    began, ended = struct.unpack(SPAN, reply.payload)
    return {"start": began, "end": ended, "released": sent + (reply.queued or 0.0)}


def _actor_times(sent: float, span: tuple[float, float]) -> Record:
    """The work's span; the actor released the request when its work started."""
    return {"start": span[0], "end": span[1], "released": span[0]}


@ray.remote(num_cpus=0.5)
def via_broker(
    endpoint: str, service: str, share: list[tuple[int, float]], work: float, timeout: float
) -> list[Record]:
    """(a): requests through the broker, whose flow control holds them."""
    client = gdray.client(endpoint)
    sent = _send(share, lambda: client.submit(service, struct.pack(WORK, work)))
    return _collect(sent, _broker_times, timeout)


@ray.remote(num_cpus=0.5)
def via_actor(actor: Any, share: list[tuple[int, float]], work: float, timeout: float) -> list[Record]:
    """(b): requests through the flow-controlled actor."""
    sent = _send(share, lambda: actor.process.remote(work).future())
    return _collect(sent, _actor_times, timeout)


@ray.remote(num_cpus=0.5)
def probe_broker(endpoint: str, service: str, count: int) -> list[float]:
    """Round trips (s) of ``count`` requests one at a time through the broker, no work."""
    client = gdray.client(endpoint)
    times = []
    for _ in range(count):
        start = time.monotonic()
        client.request(service, struct.pack(WORK, 0.0), timeout=30)
        times.append(time.monotonic() - start)
    return times


@ray.remote(num_cpus=0.5)
def probe_actor(actor: Any, count: int) -> list[float]:
    """Round trips (s) of ``count`` calls one at a time through the actor, no work."""
    times = []
    for _ in range(count):
        start = time.monotonic()
        ray.get(actor.process.remote(0.0), timeout=30)
        times.append(time.monotonic() - start)
    return times


@ray.remote(num_cpus=0.5)
def warm(seconds: float) -> int:
    """Hold a Ray worker process ``seconds`` (several at once make Ray start as many processes)."""
    time.sleep(seconds)
    return os.getpid()


GATE_WAIT = 120.0  # seconds a gated task waits for the others to run
GATE_LEAD = 1.0  # seconds from all of them running to their start
RETRY_GRACE = 60.0  # seconds past its end a gated run still tries a refused call again


@ray.remote(num_cpus=0)
class Gate:
    """Holds ``parties`` tasks until all of them run, then lets them go together ``lead`` seconds later: Ray
    starting a worker process for each (seconds on a loaded machine) does not eat into a timed run."""

    def __init__(self, parties: int, lead: float = GATE_LEAD) -> None:
        self.parties = parties
        self.lead = lead
        self.arrived = 0
        self.start = 0.0
        self.opened = asyncio.Event()

    async def arrive(self) -> float:
        """Wait for the others; the monotonic time they all start at."""
        self.arrived += 1
        if self.arrived == self.parties:
            self.start = time.monotonic() + self.lead
            self.opened.set()
        await self.opened.wait()
        return self.start

    async def opening(self) -> float:
        """Wait until all have arrived (for one not among them, the driver); the time they start at."""
        await self.opened.wait()
        return self.start


def _gated_loop(gate: Any, seconds: float, threads: int, call: Callable[[float], T | None]) -> tuple[float, list[T]]:
    """Once ``gate`` opens, ``threads`` threads calling ``call(until)`` again as soon as it returns, for
    ``seconds``; a None ends that thread. The start, and what the calls returned."""
    start = float(ray.get(gate.arrive.remote(), timeout=GATE_WAIT))
    until = start + seconds
    results: list[T] = []
    _sleep_until(start)

    def loop() -> None:
        while time.monotonic() < until and (result := call(until)) is not None:
            results.append(result)  # list.append is atomic

    callers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(until - time.monotonic() + RETRY_GRACE + 90)
    return start, results


@ray.remote(num_cpus=0.5)
def closed_loop(
    endpoint: str, service: str, gate: Any, seconds: float, threads: int
) -> tuple[float, list[tuple[float, float]]]:
    """Requests to ``service`` on this process's client, one per thread outstanding, for ``seconds`` once
    ``gate`` opens: the start, and each reply's (monotonic time, service time)."""
    client = gdray.client(endpoint)

    def call(until: float) -> tuple[float, float]:
        reply = client.request(service, b"x", timeout=60)
        return time.monotonic(), reply.served or 0.0

    return _gated_loop(gate, seconds, threads, call)


@ray.remote(num_cpus=0.5)
def actor_loop(actor: Any, gate: Any, seconds: float, threads: int) -> tuple[float, list[float]]:
    """Calls of a flow-controlled ``actor`` whose ``process()`` says False when refused, one per thread
    outstanding, for ``seconds`` once ``gate`` opens; a refused call is tried again at once (until
    :data:`RETRY_GRACE` past the end). The start, and when each call was answered (monotonic)."""

    def call(until: float) -> float | None:
        while not ray.get(actor.process.remote(), timeout=60):
            if time.monotonic() > until + RETRY_GRACE:
                return None
        return time.monotonic()

    return _gated_loop(gate, seconds, threads, call)
