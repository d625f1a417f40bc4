"""``generaldomo demo``: broker, echo worker and client in this process, on each transport.

This module owns the demo: what it starts, what it prints, and its exit status (1 if any reply was wrong).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from generaldomo.cli import options
from generaldomo.cli.command import Command, Exit
from generaldomo.io.transport import draft_available, require_draft
from generaldomo.sansio.config import knobs

__all__ = ["COMMAND", "arguments", "run"]


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--transport",
        dest="demo_transport",
        choices=(*options.TRANSPORTS, "both"),
        default="both",
        help="socket type to show",
    )
    options.add_knob(parser, knobs.COMMANDS["requests"], default=1000)


def run(args: argparse.Namespace) -> int:
    transports: tuple[str, ...] = options.TRANSPORTS if args.demo_transport == "both" else (args.demo_transport,)
    if args.demo_transport == "server":
        require_draft()
    if args.demo_transport == "both" and not draft_available():
        print("generaldomo demo: no draft sockets; showing the router transport only", file=sys.stderr)
        transports = ("router",)
    failures = sum(not _show(transport, args.requests) for transport in transports)
    return Exit.FAILED if failures else Exit.OK


def _show(transport: str, requests: int) -> bool:
    """Run the demo on one transport; True if every reply was right."""
    from generaldomo.io.broker import Broker  # here: the other commands do not load the broker
    from generaldomo.peers.client import Client
    from generaldomo.peers.worker import Worker

    inproc = f"inproc://generaldomo-demo-{transport}"
    with Broker(transport, [inproc, "tcp://127.0.0.1:*"]) as broker:
        broker.start()
        tcp = broker.endpoint(transport, "tcp")
        worker = Worker(tcp, "echo", lambda payload: payload, transport)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        with Client(inproc, transport) as client:
            first = client.request("echo", b"hello, generaldomo", timeout=10)
            print(f"[{transport}] broker on {inproc} and {tcp}; echo worker over tcp; client over inproc")
            print(f"[{transport}] echo replied {first.payload!r}")
            started = time.perf_counter()
            futures = [client.submit("echo", b"%d" % n) for n in range(requests)]
            ok = all(f.result(30).payload == b"%d" % n for n, f in enumerate(futures))
            elapsed = time.perf_counter() - started
            print(
                f"[{transport}] {requests} pipelined requests, all answered correctly: {ok} "
                f"({requests / elapsed:,.0f} req/s)"
            )
        worker.stop()
        thread.join(5)
    return ok


COMMAND = Command("demo", "broker + echo worker + client in this process", arguments, run)
