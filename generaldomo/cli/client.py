"""``generaldomo client``: send one request, print the reply's frames one a line.

This module owns the client command's flags, its output and its exit status; it runs
:class:`generaldomo.peers.client.Client` and adds no behaviour of its own.
"""

from __future__ import annotations

import argparse
import sys

from generaldomo.cli import options
from generaldomo.cli.command import Command
from generaldomo.peers.client import Client, RequestFailed


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    options.connect(parser)
    options.timeout(parser, "the reply")
    options.heartbeats(parser, "the broker")
    parser.add_argument("service", help="request description (a service name with the default resolver)")
    parser.add_argument("payload", nargs="*", help="payload frames (UTF-8; default: one empty frame)")


def run(args: argparse.Namespace) -> int:
    with Client(
        options.endpoint(args), args.transport, heartbeat_interval=args.heartbeat, liveness=args.liveness
    ) as client:
        try:
            reply = client.request(args.service, [p.encode() for p in args.payload], timeout=args.timeout)
        except RequestFailed as error:
            print(f"generaldomo client: request failed: {error}", file=sys.stderr)
            return 1
        except TimeoutError as error:
            print(f"generaldomo client: {error}", file=sys.stderr)
            return 1
    for frame in reply.frames:
        print(frame.decode(errors="replace"))
    return 0


COMMAND = Command("client", "send one request and print the reply", arguments, run)
