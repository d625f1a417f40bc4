"""A load generator process of part ``openloop``: ``python -m bench.openloop_gen KIND ENDPOINT PAYLOAD``.

One raw socket, one thread, no client library: the cheapest client there is, so that the system under test,
not the generator, sets the latency. KIND is the wire the broker speaks to clients: ``mdp01`` (a DEALER speaking
MDP/0.1: the generaldomo ROUTER broker, the minimal loop), ``majortomo`` (a DEALER speaking majortomo's MDP/0.2,
whose client commands are numbered as its worker commands are: REQUEST 2, FINAL 4, and whose FINAL carries no
service frame) or
``gdp`` (a CLIENT socket speaking generaldomo's protocol in one packed part: the SERVER broker). Each request's
first 8 bytes carry its number, so a reply is matched to its request in every dialect (MDP/0.1 replies carry no
id of their own); the echo workers send the body back unchanged.

The process prints ``ready`` once connected and then reads one JSON command per line on stdin, answering each
with one JSON line:

- ``{"calibrate": SECONDS, "window": N, "start": T}``: closed loop from monotonic time T, N outstanding, for
  SECONDS: how many replies came (the saturation estimate's share of this process).
- ``{"rate": R, "warmup": W, "seconds": S, "drain": D, "start": T, "seed": K}``: open loop: requests at Poisson
  times (rate R/s, seeded by K) from T for W + S seconds, none waiting for a reply. Requests scheduled in the
  last S seconds are measured: each latency is reply time minus the request's *scheduled* send time, so a late
  send counts against the system as it would against a user (no coordinated omission); the lag of each actual
  send behind its schedule is recorded too. After the last scheduled send it waits at most D seconds for the
  replies; a request still unanswered then is counted as lost and recorded at that wait's end (a lower bound).
  The answer carries both HDR histograms (``hdrhistogram``, base64, microseconds) for the parent to merge.

Every loop is bounded by the times given; at most :data:`MAX_OUTSTANDING` requests are in flight (beyond that
the generator stops sending and says so). Dies with its parent (``bench.peer``'s death signal).
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import select
import sys
import time
from array import array
from collections.abc import Callable
from typing import Any

import zmq
from hdrh.histogram import HdrHistogram

from bench.peer import _die_with_parent
from generaldomo.io.speedups import _pyzmq_extension
from generaldomo.sansio.wire import codec, protocol

SERVICE = b"echo"
LOWEST_US, HIGHEST_US, DIGITS = 1, 120_000_000, 3  # histogram range: 1 µs to 2 minutes, 3 significant digits
MAX_OUTSTANDING = 100_000
MDP01_CLIENT, MDP02_CLIENT, MAJORTOMO_REQUEST, MAJORTOMO_FINAL = b"MDPC01", b"MDPC02", b"\x02", b"\x04"


def histogram() -> HdrHistogram:
    """An empty histogram of latencies in microseconds (the parent makes the same to merge into)."""
    return HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS)


class Wire:
    """One connected socket: ``send(number, body)`` sends a request; ``read()`` returns the number of the
    request a waiting reply answers (None for anything else); ``waiting()`` says whether a message waits."""

    def __init__(self, kind: str, endpoint: str) -> None:
        context = zmq.Context.instance()
        self.sock = context.socket(zmq.CLIENT if kind == "gdp" else zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.connect(endpoint)
        self.fd, self._rearm = self._poller_fd() if kind == "gdp" else (self.sock.getsockopt(zmq.FD), None)
        self.send: Callable[[int, bytes], None]
        self.read: Callable[[], int | None]
        self.send, self.read = {"mdp01": (self._send01, self._read01), "majortomo": (self._send_mt, self._read_mt)}.get(
            kind, (self._send_gdp, self._read_gdp)
        )

    def waiting(self) -> bool:
        return bool(self.sock.getsockopt(zmq.EVENTS) & zmq.POLLIN)

    def _send01(self, number: int, body: bytes) -> None:
        self.sock.send_multipart([b"", MDP01_CLIENT, SERVICE, number.to_bytes(8, "little") + body])

    def _read01(self) -> int | None:
        frames = self.sock.recv_multipart()  # b"", MDPC01, service, body
        return int.from_bytes(frames[3][:8], "little") if len(frames) >= 4 and frames[1] == MDP01_CLIENT else None

    def _send_mt(self, number: int, body: bytes) -> None:
        self.sock.send_multipart([b"", MDP02_CLIENT, MAJORTOMO_REQUEST, SERVICE, number.to_bytes(8, "little") + body])

    def _read_mt(self) -> int | None:
        frames = self.sock.recv_multipart()  # b"", MDPC02, FINAL (or PARTIAL), body
        if len(frames) >= 4 and frames[1] == MDP02_CLIENT and frames[2] == MAJORTOMO_FINAL:
            return int.from_bytes(frames[3][:8], "little")
        return None

    def _send_gdp(self, number: int, body: bytes) -> None:
        number_bytes = number.to_bytes(8, "little")
        self.sock.send(codec.encode(protocol.gdp_request(number_bytes, SERVICE, [number_bytes + body])))

    def _read_gdp(self) -> int | None:
        message = protocol.read_client_message(codec.decode(self.sock.recv()))
        return int.from_bytes(message.request_id, "little") if isinstance(message, protocol.FinalReply) else None

    def wait(self, seconds: float) -> None:
        """Block until a message may wait or ``seconds`` pass (the FD is edge-triggered: ``waiting()`` first)."""
        if seconds <= 0 or self.waiting():
            return
        if self._rearm is not None:
            self._rearm()
            if self.waiting():
                return
        select.select([self.fd], [], [], seconds)

    def _poller_fd(self) -> tuple[int, Callable[[], None]]:
        """A thread-safe socket has no ZMQ_FD, and libzmq's polls wait in whole milliseconds (too coarse for
        Poisson gaps of a few hundred microseconds). So: a libzmq poller holding the socket (the draft
        ``zmq_poller_*`` calls, through ctypes, from the libzmq that pyzmq loaded), whose signalling FD
        ``select`` waits on with microsecond timeouts; ``zmq_poller_wait_all`` with no timeout consumes a
        signal (pyzmq's own FD for such sockets never does, so it stays readable and a wait would spin)."""
        lib = ctypes.CDLL(_pyzmq_extension(), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        lib.zmq_poller_new.restype = ctypes.c_void_p
        lib.zmq_poller_add.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_short]
        lib.zmq_poller_fd.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        lib.zmq_poller_wait_all.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_long]
        poller = lib.zmq_poller_new()
        fd = ctypes.c_int()
        if not poller or lib.zmq_poller_add(poller, self.sock.underlying, None, zmq.POLLIN):
            raise OSError("libzmq's zmq_poller_new/zmq_poller_add failed")
        if lib.zmq_poller_fd(poller, ctypes.byref(fd)):
            raise OSError("libzmq's zmq_poller_fd failed")
        events = ctypes.create_string_buffer(64)  # room for one zmq_poller_event_t, never read
        self._poller = (lib, poller, events)  # kept alive with the socket
        return fd.value, lambda: lib.zmq_poller_wait_all(poller, events, 1, 0)


class Generator:
    """The request loops over one :class:`Wire`; request numbers never repeat within the process."""

    def __init__(self, wire: Wire, payload: int) -> None:
        self.wire, self.body, self.number = wire, b"x" * max(0, payload - 8), 0

    def calibrate(self, start: float, seconds: float, window: int) -> dict[str, Any]:
        """Closed loop with ``window`` outstanding for ``seconds`` from ``start``: replies counted."""
        wire, clock = self.wire, time.monotonic
        _sleep_until(start)
        end, outstanding, replies = start + seconds, 0, 0
        while True:
            while outstanding < window and clock() < end:
                self.number += 1
                wire.send(self.number, self.body)
                outstanding += 1
            while wire.waiting():
                if wire.read() is not None:
                    outstanding -= 1
                    if clock() < end:
                        replies += 1
            now = clock()
            if now >= end and (outstanding == 0 or now >= end + 5.0):
                return {"replies": replies, "seconds": seconds}
            wire.wait(min(0.05, max(0.0, end + 5.0 - now)))

    def open_loop(
        self, rate: float, start: float, warmup: float, seconds: float, drain: float, seed: int
    ) -> dict[str, Any]:
        """Poisson arrivals at ``rate``/s from ``start``; see the module's docstring."""
        wire, clock, draw = self.wire, time.monotonic, random.Random(seed).expovariate
        measured_from, stop = start + warmup, start + warmup + seconds
        scheduled: dict[int, float] = {}  # request number -> its scheduled send time
        latencies, lags = array("d"), array("d")  # seconds, recorded into the histograms after the loop
        sent = answered_in_window = capped = 0
        due = start + draw(rate)
        _sleep_until(start)
        while True:
            now = clock()
            while due <= now and due < stop:
                if len(scheduled) >= MAX_OUTSTANDING:
                    capped += 1
                else:
                    self.number += 1
                    wire.send(self.number, self.body)
                    scheduled[self.number] = due
                    if due >= measured_from:
                        sent += 1
                        lags.append(clock() - due)
                due += draw(rate)
                now = clock()
            while wire.waiting():
                number = wire.read()
                when = scheduled.pop(number, None) if number is not None else None
                if when is None:
                    continue
                now = clock()
                if when >= measured_from:
                    latencies.append(now - when)
                if measured_from <= now < stop:
                    answered_in_window += 1
            now = clock()
            if due >= stop and (not scheduled or now >= stop + drain):
                break
            wire.wait((due if due < stop else stop + drain) - now)
        lost = [when for when in scheduled.values() if when >= measured_from]
        latencies.extend(now - when for when in lost)
        scheduled.clear()
        return {
            "sent": sent,
            "answered": len(latencies) - len(lost),
            "lost": len(lost),
            "capped": capped,
            "throughput": answered_in_window / seconds,
            "latency": _encode(latencies),
            "lag": _encode(lags),
            "lag_max_us": max(lags, default=0.0) * 1e6,
        }


def _encode(seconds: array[float]) -> str:
    recorded = histogram()
    for value in seconds:
        recorded.record_value(min(HIGHEST_US, max(LOWEST_US, round(value * 1e6))))
    return recorded.encode().decode("ascii")


def _sleep_until(when: float) -> None:
    pause = when - time.monotonic()
    if pause > 0:
        time.sleep(pause)


def main(argv: list[str]) -> None:
    """Connect, say ``ready``, then answer one JSON command per stdin line until stdin closes."""
    _die_with_parent()
    kind, endpoint, payload = argv[0], argv[1], int(argv[2])
    generator = Generator(Wire(kind, endpoint), payload)
    print("ready", flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if "calibrate" in command:
            answer = generator.calibrate(command["start"], command["calibrate"], command["window"])
        else:
            answer = generator.open_loop(
                command["rate"],
                command["start"],
                command["warmup"],
                command["seconds"],
                command["drain"],
                command["seed"],
            )
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
