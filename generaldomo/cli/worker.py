"""``generaldomo worker [APP]``: the user's worker app, or the built-in echo worker, until SIGINT or SIGTERM.

This module owns the worker command's flags, its signal handling and what it reports: when the worker is not
registered within ``--liveness`` heartbeats, a warning on stderr saying why (the broker does not answer, or
answers but lists no worker for the service, found by :mod:`generaldomo.cli.probe` on a connection of its own;
with CURVE, what to check, since a worker key may not ask the broker), and a line when that is resolved.
With an ``APP`` (``module:attr``) or ``--concurrency`` above 1 it runs a pool of worker slots
(:func:`generaldomo.peers.pool.run_app`); otherwise one :class:`generaldomo.peers.worker.Worker`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

from generaldomo.cli import options, probe
from generaldomo.cli.command import Command, Exit
from generaldomo.sansio.config import knobs

__all__ = ["COMMAND", "ECHO", "arguments", "echo", "run"]

if TYPE_CHECKING:  # imported where used: the other commands do not load the pools
    from generaldomo.io.peer.connection import Curve
    from generaldomo.peers.worker import Handler, Worker

ECHO = "echo"


def arguments(parser: argparse.ArgumentParser) -> None:
    from generaldomo.peers.pool import DEFAULT_GRACE, POOLS, START_METHODS

    parser.add_argument(
        "app",
        nargs="?",
        metavar="APP",
        help="module:attr of a worker app or handler function (module alone: its `app`); default: the echo worker",
    )
    options.transport(parser)
    options.connect(parser)
    parser.add_argument(
        "--service",
        action="append",
        metavar="DESCRIPTION",
        help=f"service description to announce (echo worker; default {ECHO}), or, with APP, a service of the app "
        "to serve (repeatable; default: all of them)",
    )
    options.add_knob(parser, knobs.COMMANDS["concurrency"], default=1)
    parser.add_argument("--pool", choices=POOLS, default="thread", help="where the N slots run")
    options.add_knob(parser, knobs.COMMANDS["stop_grace"], default=DEFAULT_GRACE)
    parser.add_argument(
        "--start-method", choices=START_METHODS, default="spawn", help="how the process pool starts its processes"
    )
    options.add_knob(parser, knobs.COMMANDS["sleep"], default=0.0)
    parser.add_argument("--tag", default="", help="prefix every reply with TAG: (to tell workers apart; default: none)")
    options.heartbeats(parser, "the broker")
    options.curve(parser)


def echo(sleep: float, tag: str) -> Handler:
    """A handler returning its payload, after ``sleep`` seconds, prefixed by ``tag:`` if a tag is given."""
    prefix = f"{tag}:".encode() if tag else b""

    def handler(payload: bytes | tuple[bytes, ...]) -> bytes | tuple[bytes, ...]:
        if sleep:  # sleep(0) would still give up the CPU on every request
            time.sleep(sleep)
        if isinstance(payload, bytes):
            return prefix + payload
        return (prefix, *payload) if prefix else payload

    return handler


def run(args: argparse.Namespace) -> int:
    from generaldomo.peers.worker import Worker

    if args.app is not None or args.concurrency > 1:
        return _run_pool(args)
    if args.service and len(args.service) > 1:
        raise ValueError("the echo worker serves one --service; give an APP to serve several")
    args.service = args.service[0] if args.service else ECHO
    target = options.peer(args)
    worker = Worker(
        target.where,
        args.service,
        echo(args.sleep, args.tag),
        args.transport,
        heartbeat_interval=args.heartbeat_interval,
        liveness=args.liveness,
        **target.curve.kwargs(),
    )

    def leave(*_: object) -> None:
        worker.stop()  # tells the broker at once, also mid-task, so the task is reissued
        if worker.busy:
            raise SystemExit(0)  # interrupt the handler; its result would be discarded anyway

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, leave)
    print(f"generaldomo worker: serving {args.service!r} from {worker.endpoint} ({args.transport})", flush=True)
    stop = threading.Event()
    watching = (args, worker, target.curve.curve(), stop)
    watch = threading.Thread(target=_watch, args=watching, name="generaldomo-watch", daemon=True)
    watch.start()
    try:
        worker.serve()
    finally:
        stop.set()
    print(f"generaldomo worker: stopped serving {args.service!r} after {worker.tasks_done} tasks", flush=True)
    return Exit.OK


def _run_pool(args: argparse.Namespace) -> int:
    """Serve the app (or the echo handler) in ``--concurrency`` slots of a ``--pool``."""
    from generaldomo.peers.app import App
    from generaldomo.peers.pool import run_app

    spec: str | App = args.app
    services = args.service
    if spec is None:
        spec = App(ECHO)
        spec.add(services[0] if services else ECHO, echo(args.sleep, args.tag))
        services = None
    target = options.peer(args)
    return run_app(
        spec,
        target.where,
        args.transport,
        concurrency=args.concurrency,
        pool=args.pool,
        stop_grace=args.stop_grace,
        services=services,
        heartbeat_interval=args.heartbeat_interval,
        liveness=args.liveness,
        start_method=args.start_method,
        **target.curve.kwargs(),
    )


def _watch(args: argparse.Namespace, worker: Worker, curve: Curve | None, stop: threading.Event) -> None:
    """Every heartbeat until the worker is registered, find out why it is not; say so when that changes; once it
    is registered, say so if a warning came before (this thread's, or a handshake failure the worker logged,
    however briefly it lasted: it may have come and gone between two looks)."""
    grace = args.heartbeat_interval * args.liveness  # a few heartbeats to register in
    patience = max(args.heartbeat_interval, probe.TIMEOUT)
    warned = ""
    while not stop.wait(grace if not warned else args.heartbeat_interval):
        if worker.handshake_failure is not None:
            warned = worker.handshake_failure.cause  # the worker logged it at once
            continue
        problem = None if worker.registered else _why_unregistered(args, worker.endpoint, curve, patience)
        if problem is None:
            if warned or worker.handshake_failures:
                message = f"generaldomo worker: registered for {args.service!r} at {worker.endpoint}"
                print(message, file=sys.stderr, flush=True)
            return
        if problem != warned:
            print(f"generaldomo worker: warning: {problem}; still trying", file=sys.stderr, flush=True)
            warned = problem


def _why_unregistered(args: argparse.Namespace, endpoint: str, curve: Curve | None, patience: float) -> str | None:
    """What keeps the worker from registering, as far as the broker says (None: nothing, it is served)."""
    if curve is not None:  # a worker key has no client role, so the broker would not answer the probes
        return (
            f"the broker at {endpoint} has not answered this worker over CURVE (is its key in the broker's "
            f"--workers directory and allowed {args.service!r}, and --curve-server-key the broker's key?)"
        )
    if probe.broker_instance(endpoint, args.transport, patience) is None:
        hint = probe.transport_hint(endpoint, args.transport, patience)
        return f"no broker has answered at {endpoint} over {args.transport}{hint}"
    if not probe.served(endpoint, args.transport, args.service, patience):
        return f"the broker at {endpoint} answers but lists no worker for {args.service!r}"
    return None


COMMAND = Command(
    "worker", "run a worker app (module:attr) or the built-in echo worker", arguments, run, configurable=True
)
