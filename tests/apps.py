"""Worker apps for the tests, served by ``python -m generaldomo worker tests.apps:ATTR``.

``app`` serves two services; ``faults`` records each attempt of each task in files, so that a test can tell
how often a task ran; ``aio`` has async handlers; ``restarts`` runs ``ID:MS`` tasks (MS milliseconds of work),
each run recorded as a file in ``$GD_TEST_RUNS``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Generator
from pathlib import Path
from typing import Any

from generaldomo import App, Reject
from generaldomo.peers.task import TaskContext

app = App("tests")


@app.service("square", serializer="json")
def square(numbers: list[int]) -> dict[str, Any]:
    return {"squares": [n * n for n in numbers], "pid": os.getpid()}


@app.service("upper")
def upper(payload: bytes) -> bytes:
    return payload.upper()


faults = App("faults")


@faults.service("nap", serializer="json")
def nap(task: dict[str, Any]) -> dict[str, Any]:
    """Sleeps ``first`` seconds on a task's first attempt, ``again`` on later ones; files count attempts."""
    folder = Path(task["dir"])
    attempt = len(list(folder.glob(f"{task['id']}.attempt-*"))) + 1
    (folder / f"{task['id']}.attempt-{attempt}-{os.getpid()}").touch()
    time.sleep(task["first"] if attempt == 1 else task["again"])
    return {"id": task["id"], "attempt": attempt, "pid": os.getpid()}


@faults.service("fail", serializer="msgpack")
def fail(value: Any) -> Any:
    if value == "reject":
        raise Reject(422, "no thanks")
    raise ValueError(f"cannot take {value!r}")


@faults.service("crash")
def crash(payload: bytes) -> bytes:
    """Ends its process at once, as a segfaulting extension would (process pools only)."""
    os._exit(int(payload or b"3"))


@faults.service("quit")
def quit(payload: bytes) -> bytes:
    raise SystemExit(f"quit on {payload!r}")  # not an Exception: it ends the slot's serving thread


aio = App("aio")  # for the attributes resolver


@aio.service({"service": "wait", "kind": "async"}, serializer="json")
async def wait(seconds: float) -> dict[str, Any]:
    await asyncio.sleep(seconds)
    return {"slept": seconds, "loop": id(asyncio.get_running_loop())}


@aio.service({"service": "count"}, serializer="msgpack")
async def count(n: int) -> AsyncIterator[int]:
    for i in range(n):
        await asyncio.sleep(0)
        yield i


restarts = App("restarts")


@restarts.service("work")
def work(payload: bytes) -> bytes:
    """``ID:MS``: records this run of task ID (a file in ``$GD_TEST_RUNS``), works MS ms, answers ``ran ID``."""
    task, _, milliseconds = payload.rpartition(b":")
    run = Path(os.environ["GD_TEST_RUNS"]) / f"{task.decode()}.{os.getpid()}.{time.monotonic_ns()}"
    run.touch()
    time.sleep(int(milliseconds) / 1000)
    return b"ran " + task


deadlines = App("deadlines")


@deadlines.service("fft", serializer="json")
def fft(signal: list[float], task: TaskContext) -> dict[str, Any]:
    """The Deadlines section's app handler: it takes the task's context as its second argument."""
    return {"n": len(signal), "time_left": task.time_left(), "cancelled": task.cancelled, "pid": os.getpid()}


documented = App("documented")  # each kind of handler the worker apps guide lists, served by `generaldomo worker`


@documented.service("steps", serializer="json")
def steps(n: int) -> Generator[dict[str, int], None, str]:
    """A generator: each yield a partial result, its return value the final one."""
    for i in range(n):
        yield {"step": i}
    return "done"


@documented.service("later", serializer="json")
async def later(value: Any) -> dict[str, Any]:
    """An async def, on the slot's own event loop."""
    await asyncio.sleep(0)
    return {"echo": value}


@documented.service("ticks", serializer="msgpack")
async def ticks(n: int) -> AsyncIterator[int]:
    """An async generator: partials, and None as the final result."""
    for i in range(n):
        await asyncio.sleep(0)
        yield i


@documented.service("frames")
def frames(payload: bytes | tuple[bytes, ...]) -> tuple[bytes, ...]:
    """No serializer: bytes or a tuple of frames in and out, as a Worker handler."""
    parts = (payload,) if isinstance(payload, bytes) else payload
    return tuple(part.upper() for part in reversed(parts))


@documented.service("picky", serializer="json")
def picky(item: str) -> str:
    """Reject answers with a status of its choice; any other exception is a 500 with its type and message."""
    if item == "missing":
        raise Reject(404, "no such item")
    raise KeyError(item)
