"""``generaldomo flow``: show or change a service's flow limits (``mmi.flow``).

This module owns the flow command's flags; only the limits given on the line are changed.
"""

from __future__ import annotations

import argparse
import json
import sys

from generaldomo.cli import options, probe
from generaldomo.cli.broker import bounds, limit
from generaldomo.cli.command import Command, Exit
from generaldomo.peers.client import Client, RequestFailed

LIMITS = ("rate", "burst", "concurrency", "bytes_in_flight", "adaptive")


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
    parser.add_argument(
        "--bytes-in-flight",
        type=limit(int),
        default=unset,
        metavar="BYTES",
        help="request bytes in flight at once (a larger task goes alone); 'none' lifts it (default: unchanged)",
    )
    parser.add_argument(
        "--adaptive",
        type=_bounds,
        default=unset,
        metavar="MIN..MAX",
        help="adapt the concurrency cap to service times within these bounds; 'none' turns it off (default: unchanged)",
    )
    options.timeout(parser, "the answer")


def _bounds(text: str) -> dict[str, int] | None:
    """``MIN..MAX`` as the JSON bounds ``mmi.flow`` takes, or None ('none': off)."""
    try:
        limits = bounds(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return None if limits is None else {"min": limits.min, "max": limits.max}


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
