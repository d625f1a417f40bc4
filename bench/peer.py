"""Entry points of the bench's child processes: ``python -m bench.peer KIND ...``.

Each prints one banner line (its endpoint, or what it serves) and runs until SIGTERM; each dies with the bench
(``PR_SET_PDEATHSIG``) should the bench be killed.

- ``gd ARGS...``: the ``generaldomo`` command itself (``broker ...`` or ``worker ...``).
- ``gd-broker TRANSPORT BIND [PROFILE]``: a broker serving in the main thread, under cProfile if PROFILE is given.
- ``echo router|server BIND``: a brokerless echo peer (ROUTER or SERVER socket) for the baseline.
- ``mt-broker ENDPOINT`` / ``mt-worker ENDPOINT SERVICE``: the majortomo broker and an echo worker of its own.
- ``min-broker BIND``: the minimal pure-Python MDP/0.1 forwarding loop (:mod:`bench.minloop`).
- ``min-broker-c BIND``: the same loop reading and writing through generaldomo's C accelerator.
- ``exec PROGRAM ARGS...``: any program (a C peer, the C reference broker), after the banner ``exec PROGRAM``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable

import zmq

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def _on_term(stop: Callable[[], None]) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop())


def echo(kind: str, bind: str) -> None:
    """Echo every message back to its sender until SIGTERM."""
    context = zmq.Context.instance()
    sock = context.socket(zmq.ROUTER if kind == "router" else zmq.SERVER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(bind)
    print(sock.getsockopt(zmq.LAST_ENDPOINT).decode(), flush=True)
    running = [True]
    _on_term(lambda: running.__setitem__(0, False))
    serve_echo(sock, kind, lambda: running[0])
    sock.close()


def serve_echo(sock: zmq.Socket, kind: str, running: Callable[[], bool]) -> None:
    """The echo loop, shared with the in-process (inproc) echo peer."""
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while running():
        if not poller.poll(200):
            continue
        while True:
            try:
                if kind == "router":
                    sock.send_multipart(sock.recv_multipart(zmq.NOBLOCK, copy=False), copy=False)
                else:
                    frame = sock.recv(zmq.NOBLOCK, copy=False)
                    reply = zmq.Frame(frame.buffer)
                    reply.routing_id = frame.routing_id
                    sock.send(reply)
            except zmq.Again:
                break
            except zmq.ZMQError:  # the peer went away
                continue


def gd_broker(transport: str, bind: str, profile: str | None = None) -> None:
    """A generaldomo broker whose loop runs in this main thread (so that cProfile sees it)."""
    from generaldomo import Broker

    broker = Broker(transport, [bind])
    print(broker.endpoint(transport), flush=True)
    _on_term(broker.stop)
    if profile is None:
        broker.run()
        return
    import cProfile

    profiler = cProfile.Profile(time.thread_time)  # CPU time of this thread: waiting in poll costs nothing
    try:
        profiler.runcall(broker.run)
    finally:
        profiler.dump_stats(profile)


def mt_broker(endpoint: str) -> None:
    """The majortomo broker, logging warnings only (its default INFO logs a line per message)."""
    from majortomo.broker import Broker

    logging.basicConfig(level=logging.WARNING)
    broker = Broker(bind=endpoint)
    broker.bind()  # bind before the banner, so that no later ``tcp://127.0.0.1:*`` bind can take this port
    broker.bind = lambda: None  # type: ignore[method-assign]  # run() binds again otherwise
    _on_term(broker.stop)
    print(endpoint, flush=True)
    broker.run()


def mt_worker(endpoint: str, service: str) -> None:
    """A majortomo echo worker."""
    from majortomo import Worker, WorkerRequestsIterator

    logging.basicConfig(level=logging.WARNING)
    requests = WorkerRequestsIterator(Worker(endpoint, service))
    requests.stop_on_signal()
    print(f"majortomo worker {service}", flush=True)
    for request in requests:
        requests.send_reply_final(request)


def min_broker(bind: str) -> None:
    """The minimal forwarding loop, the pure-Python floor."""
    from bench.minloop import serve

    serve(bind)


def min_broker_c(bind: str) -> None:
    """The minimal forwarding loop reading and writing through generaldomo's C accelerator."""
    from bench.minloop import serve

    serve(bind, native=True)


def run_program(program: str, *args: str) -> None:
    """Become ``program`` (the death signal set above survives ``execv``)."""
    print(f"exec {program}", flush=True)
    os.execv(program, [program, *args])


def main(argv: list[str]) -> None:
    """Dispatch on the first argument."""
    _die_with_parent()
    kind, args = argv[0], argv[1:]
    if kind == "gd":
        from generaldomo.cli import main as gd_main

        sys.exit(gd_main(args))
    handlers: dict[str, Callable[..., None]] = {
        "gd-broker": gd_broker,
        "echo": echo,
        "mt-broker": mt_broker,
        "mt-worker": mt_worker,
        "min-broker": min_broker,
        "min-broker-c": min_broker_c,
        "exec": run_program,
    }
    handlers[kind](*args)


if __name__ == "__main__":
    main(sys.argv[1:])
