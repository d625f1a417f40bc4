"""Peers made of one socket and the protocol module (no retries, no session), a CLI broker process, and its
memory from /proc: for the tests that attack a broker over real sockets."""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time

import zmq

from generaldomo import Client
from generaldomo.sansio.wire import codec


class RawClient:
    """A generaldomo client made of one socket and the protocol module: no retries, no session."""

    def __init__(self, context: zmq.Context, endpoint: str, transport: str) -> None:
        self.server = transport == "server"
        self.socket = context.socket(zmq.CLIENT if self.server else zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.RCVHWM, 0)  # this test reads replies in bursts: keep them all
        self.socket.connect(endpoint)

    def send(self, frames: list[bytes], flags: int = 0) -> None:
        if self.server:
            self.socket.send(codec.encode(frames), flags)
        else:
            self.socket.send_multipart(frames, flags)

    def recv(self, flags: int = 0) -> list[bytes]:
        if self.server:
            return codec.decode(self.socket.recv(flags))
        return self.socket.recv_multipart(flags)

    def close(self) -> None:
        self.socket.close(linger=0)

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """The resident memory of process ``pid`` in KiB (``VmHWM``: its peak), from /proc."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(f"{field}:"))


def start_broker(transport: str, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """A ``generaldomo broker`` process bound to an ephemeral loopback port, and its endpoint."""
    broker = subprocess.Popen(
        [sys.executable, "-m", "generaldomo", "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*",
         *flags],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert broker.stdout is not None
    return broker, broker.stdout.readline().split()[-1]


class Probe(threading.Thread):
    """An honest client doing echo round trips all the time, each timed: the worst is the attack's stall."""

    def __init__(self, endpoint: str, transport: str) -> None:
        super().__init__(daemon=True)
        self.client = Client(endpoint, transport)
        self.trips: list[float] = []
        self.failures = 0
        self.failure: BaseException | None = None  # the latest
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set() and len(self.trips) < 1_000_000:
            start = time.monotonic()
            try:
                self.client.request("echo", b"x" * 16, timeout=60)
            except Exception as error:
                self.failures += 1
                self.failure = error
            self.trips.append(time.monotonic() - start)

    def stop(self) -> dict[str, object]:
        """Stop; return the round trips' count, median and worst (seconds)."""
        self.stopping.set()
        self.join(90)
        self.client.close()
        return {
            "trips": len(self.trips), "p50": statistics.median(self.trips), "max": max(self.trips),
            "failures": self.failures, "failure": repr(self.failure),
        }  # fmt: skip
