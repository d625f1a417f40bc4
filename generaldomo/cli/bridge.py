"""``generaldomo bridge``: let generaldomo CLIENT peers use a standard MDP/0.1 broker.

This module owns the bridge command's flags; it runs :class:`generaldomo.io.bridge.Bridge` until SIGINT or
SIGTERM and adds no behaviour of its own. CURVE: ``--curve-secret`` with ``--clients``/``--admins`` for its
SERVER side (as on the broker), ``--curve-key`` and ``--curve-server-key`` for its DEALERs to a CURVE broker.
"""

from __future__ import annotations

import argparse

from generaldomo.cli import options
from generaldomo.cli.command import Command, Exit
from generaldomo.io.bridge import IDLE_TIMEOUT, Bridge

BRIDGE_ROLES = ("clients", "admins")  # who may use the bridge; it has no workers of its own


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server",
        action="append",
        required=True,
        metavar="ENDPOINT",
        help="bind a SERVER endpoint for generaldomo clients (repeatable)",
    )
    parser.add_argument("--broker", required=True, metavar="ENDPOINT", help="the MDP/0.1 broker's ROUTER endpoint")
    options.heartbeats(parser, "a client")
    parser.add_argument(
        "--idle-timeout", type=float, default=IDLE_TIMEOUT, metavar="SECONDS", help="close DEALERs idle this long"
    )
    options.curve_server(parser, BRIDGE_ROLES)
    options.curve(parser, announced=False)
    parser.set_defaults(transport="server")


def run(args: argparse.Namespace) -> int:
    bridge = Bridge(
        args.server,
        args.broker,
        heartbeat_interval=args.heartbeat,
        liveness=args.liveness,
        idle_timeout=args.idle_timeout,
        security=options.security(args, BRIDGE_ROLES),
        upstream=options.peer_curve(args).curve(),
    )
    for endpoint in bridge.endpoints:
        print(f"generaldomo bridge: server {endpoint} -> MDP/0.1 broker {args.broker}", flush=True)
    bridge.start()
    options.wait_for_signal()
    bridge.stop()
    return Exit.OK


COMMAND = Command("bridge", "let generaldomo CLIENT peers use a standard MDP/0.1 broker", arguments, run)
