"""``generaldomo worker``: the built-in echo worker, serving until SIGINT or SIGTERM.

This module owns the worker command's flags and its signal handling; it runs :class:`generaldomo.peers.worker.Worker`
and adds no behaviour of its own.
"""

from __future__ import annotations

import argparse
import signal
import time

from generaldomo.cli import options
from generaldomo.cli.command import Command
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
    worker.serve()
    return 0


COMMAND = Command("worker", "run the built-in echo worker", arguments, run)
