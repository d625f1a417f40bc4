"""``generaldomo worker``: the built-in echo worker, serving until SIGINT or SIGTERM.

This module owns the worker command's flags, its signal handling and what it reports: when the broker has
not answered within ``--liveness`` heartbeats, or answers but lists no worker for the service, a warning on
stderr (found by :mod:`generaldomo.cli.probe` on a connection of its own), and a line when that is resolved.
It runs :class:`generaldomo.peers.worker.Worker` unchanged.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from generaldomo.cli import options, probe
from generaldomo.cli.command import Command, Exit
from generaldomo.peers.worker import Handler, Worker


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    options.connect(parser)
    parser.add_argument("--service", default="echo", help="service description to announce")
    parser.add_argument("--sleep", type=float, default=0.0, metavar="SECONDS", help="simulated work per request")
    parser.add_argument("--tag", default="", help="prefix every reply with TAG: (to tell workers apart; default: none)")
    options.heartbeats(parser, "the broker")


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
    worker = Worker(
        options.endpoint(args),
        args.service,
        echo(args.sleep, args.tag),
        args.transport,
        heartbeat_interval=args.heartbeat,
        liveness=args.liveness,
    )

    def leave(*_: object) -> None:
        worker.stop()  # tells the broker at once, also mid-task, so the task is reissued
        if worker.busy:
            raise SystemExit(0)  # interrupt the handler; its result would be discarded anyway

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, leave)
    print(f"generaldomo worker: serving {args.service!r} from {worker.endpoint} ({args.transport})", flush=True)
    stop = threading.Event()
    watch = threading.Thread(target=_watch, args=(args, worker.endpoint, stop), name="generaldomo-watch", daemon=True)
    watch.start()
    try:
        worker.serve()
    finally:
        stop.set()
    return Exit.OK


def _watch(args: argparse.Namespace, endpoint: str, stop: threading.Event) -> None:
    """Every heartbeat, ask the broker whether a worker serves the service; say so when that changes."""
    grace = args.heartbeat * args.liveness  # a few heartbeats to register in
    patience = max(args.heartbeat, probe.TIMEOUT)
    warned = ""
    while not stop.wait(grace if not warned else args.heartbeat):
        if probe.broker_instance(endpoint, args.transport, patience) is None:
            hint = probe.transport_hint(endpoint, args.transport, patience)
            problem = f"no broker has answered at {endpoint} over {args.transport}{hint}"
        elif not probe.served(endpoint, args.transport, args.service, patience):
            problem = f"the broker at {endpoint} answers but lists no worker for {args.service!r}"
        else:
            if warned:
                print(f"generaldomo worker: registered for {args.service!r} at {endpoint}", file=sys.stderr, flush=True)
            return
        if problem != warned:
            print(f"generaldomo worker: warning: {problem}; still trying", file=sys.stderr, flush=True)
            warned = problem


COMMAND = Command("worker", "run the built-in echo worker", arguments, run)
