"""``generaldomo flow``: show or change a service's flow limits (``mmi.flow``).

This module owns the flow command's flags; only the limits given on the line are changed.
"""

from __future__ import annotations

import argparse
import json
import sys

from generaldomo.cli import options, probe
from generaldomo.cli.broker import limit
from generaldomo.cli.command import Command, Exit
from generaldomo.peers.client import Client, RequestFailed

LIMITS = ("rate", "burst", "concurrency")


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    parser.add_argument("service")
    options.connect(parser)
    options.curve(parser)
    unset = argparse.SUPPRESS  # options left out are absent from the namespace, so they are not changed
    parser.add_argument(
        "--rate",
        type=limit(float),
        default=unset,
        metavar="PER_SECOND",
        help="dispatches per second; 'none' lifts it (default: unchanged)",
    )
    parser.add_argument(
        "--burst",
        type=int,
        default=unset,
        metavar="N",
        help="dispatches allowed back to back (default: unchanged; a new limit starts at 1)",
    )
    parser.add_argument(
        "--concurrency",
        type=limit(int),
        default=unset,
        metavar="N",
        help="tasks in flight at once; 'none' lifts it (default: unchanged)",
    )
    options.timeout(parser, "the answer")


def run(args: argparse.Namespace) -> int:
    changes = {key: getattr(args, key) for key in LIMITS if hasattr(args, key)}
    target = options.peer(args)
    endpoint = target.endpoint
    with Client(endpoint, args.transport, **target.curve.kwargs()) as client:
        try:
            print(json.dumps(client.flow(args.service, timeout=args.timeout, **changes)))
        except RequestFailed as error:
            print(f"generaldomo flow: {error}", file=sys.stderr)
            return Exit.FAILED
        except TimeoutError:  # the broker itself answers mmi.flow
            print(f"generaldomo flow: {probe.nobody_answered(endpoint, args.transport, args.timeout)}", file=sys.stderr)
            return Exit.NO_BROKER
    return Exit.OK


COMMAND = Command("flow", "show or change a service's flow limits (mmi.flow)", arguments, run)
