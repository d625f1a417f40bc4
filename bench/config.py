"""Run sizes (full, ``--quick``, the smoke test's ``--smoke``) and progress output."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

_T0 = time.monotonic()
progress = {"last": _T0}  # when the last progress line was printed (the stall watchdog reads it)


@dataclass(frozen=True)
class Config:
    """How much to measure. Every loop is bounded by a count and by ``seconds``."""

    rounds: int = 3  # interleaved repetitions of every measurement; medians are reported
    seconds: float = 1.5  # time cap of one measurement
    sync_n: int = 3000  # requests of one sync measurement
    pipe_n: int = 20000  # requests of one pipelined measurement
    window: int = 100  # outstanding requests in pipelined mode
    payloads: tuple[int, ...] = (16, 1024, 65536)
    workers: tuple[int, ...] = (1, 4)
    schemes: tuple[str, ...] = ("tcp", "ipc", "inproc")
    transports: tuple[str, ...] = ("router", "server")
    core_n: int = 20000  # requests per core dispatch measurement
    core_workers: tuple[int, ...] = (10, 100, 1000, 10000)
    core_services: tuple[int, ...] = (1, 10, 100, 1000)
    core_queued: int = 100_000  # queued requests for the memory measurement
    core_repeats: int = 5
    peer_payloads: tuple[int, ...] = (16, 1024)
    profile_n: int = 50_000  # pipelined requests through the profiled broker
    flow_bursts: int = 4  # bursts of the flow-control timeline (10 requests every 2 s)
    ray_bursts: int = 4  # bursts of the Ray part's article scenario (10 requests every 2 s)
    # the Ray part's scaled-up rungs: (rate, requests, seconds of work); in flight at most 2 x rate x work
    ray_scale: tuple[tuple[float, int, float], ...] = (
        (10, 100, 1.0),
        (25, 250, 1.0),
        (50, 2000, 1.0),
        (100, 1000, 1.0),
        (200, 2000, 1.0),
        (400, 2000, 0.5),
        (800, 4000, 0.25),
        (1600, 8000, 0.125),
    )
    ray_clients: int = 4  # Ray tasks sending the requests
    ray_probe: int = 200  # one-at-a-time requests measuring each path's overhead
    adaptive_seconds: float = 12.0  # length of each phase of the adaptive part
    c_broker: str = ""  # part cpeers: a reference MDP/0.1 broker binding tcp://*:5555 (run in a private netns)
    out: Path = field(default=Path("bench/results"))
    name: str = "full"

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}


FULL = Config()
QUICK = replace(
    FULL,
    name="quick",
    rounds=1,
    flow_bursts=2,
    ray_bursts=2,
    ray_scale=((10, 50, 1.0), (50, 250, 1.0)),
    ray_probe=50,
    adaptive_seconds=6.0,
    seconds=0.25,
    sync_n=300,
    pipe_n=3000,
    core_n=5000,
    core_repeats=2,
    core_queued=100_000,
    profile_n=5000,
)
SMOKE = replace(
    QUICK,
    name="smoke",
    flow_bursts=1,
    seconds=0.05,
    sync_n=20,
    pipe_n=100,
    window=10,
    payloads=(16,),
    workers=(1,),
    schemes=("tcp", "inproc"),
    core_n=200,
    core_workers=(10, 100),
    core_services=(1, 10),
    core_queued=2000,
    core_repeats=1,
    peer_payloads=(16,),
    profile_n=500,
)


def say(message: str) -> None:
    """A progress line on stderr."""
    progress["last"] = now = time.monotonic()
    print(f"[bench {now - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)
