"""``generaldomo status``: print a broker's ``mmi.status`` report, once or every few seconds.

This module owns the status command's flags and exit status; the layout of the report is
:mod:`generaldomo.cli.status_view`'s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from generaldomo.cli import options, probe
from generaldomo.cli.command import Command, Exit
from generaldomo.cli.status_view import render
from generaldomo.peers.client import Client


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    options.connect(parser)
    options.curve(parser)
    parser.add_argument("endpoint", nargs="?", help="broker endpoint (same as --connect)")
    parser.add_argument("--json", action="store_true", help="print the raw JSON report")
    parser.add_argument(
        "--watch", type=float, metavar="SECONDS", help="refresh every SECONDS until interrupted (default: print once)"
    )
    options.timeout(parser, "the report")


def run(args: argparse.Namespace) -> int:
    args.connect = args.connect or args.endpoint
    target = options.peer(args)
    endpoint = target.endpoint
    with Client(endpoint, args.transport, **target.curve.kwargs()) as client:
        while True:
            try:
                report = client.status(timeout=args.timeout)
            except TimeoutError:  # the broker itself answers mmi.status
                print(
                    f"generaldomo status: {probe.nobody_answered(endpoint, args.transport, args.timeout)}",
                    file=sys.stderr,
                )
                return Exit.NO_BROKER
            print(json.dumps(report, indent=2) if args.json else render(report), flush=True)
            if args.watch is None:
                return Exit.OK
            try:
                time.sleep(args.watch)
            except KeyboardInterrupt:
                return Exit.OK
            print()


COMMAND = Command("status", "show a broker's status (mmi.status)", arguments, run)
