"""``generaldomo bridge``: let generaldomo CLIENT peers use a standard MDP/0.1 broker.

This module owns the bridge command's flags; it runs :class:`generaldomo.io.bridge.Bridge` until SIGINT or
SIGTERM and adds no behaviour of its own. CURVE: ``--curve-secret`` with ``--clients``/``--admins`` for its
SERVER side (as on the broker), ``--curve-key`` and ``--curve-server-key`` for its DEALERs to a CURVE broker;
a CURVE broker behind plaintext clients needs ``--allow-plaintext``. Its settings may also come from ``--config``
and ``GENERALDOMO_*`` variables (:mod:`generaldomo.cli.config`; ``--broker``'s key is ``mdp_broker``). It exits
non-zero (``SERVE_FAILED``) at once if its loop stops because of an error.
"""

from __future__ import annotations

import argparse
import sys

from generaldomo.cli import options
from generaldomo.cli.command import Command, Exit
from generaldomo.sansio.config import knobs

__all__ = ["BRIDGE_ROLES", "COMMAND", "arguments", "run"]

BRIDGE_ROLES = ("clients", "admins")  # who may use the bridge; it has no workers of its own


def arguments(parser: argparse.ArgumentParser) -> None:
    from generaldomo.io.bridge import IDLE_TIMEOUT, MAX_IN_FLIGHT, QUEUE_BYTES  # only `generaldomo bridge` needs them

    parser.add_argument(
        "--server",
        action="append",
        default=[],
        metavar="ENDPOINT",
        help="bind a SERVER endpoint for generaldomo clients (repeatable; required: no default)",
    )
    parser.add_argument(
        "--broker",
        dest="mdp_broker",  # its key and variable: GENERALDOMO_BROKER is the peers' broker endpoint (--connect)
        metavar="ENDPOINT",
        help="the MDP/0.1 broker's ROUTER endpoint (required: no default)",
    )
    options.heartbeats(parser, "a client")
    options.add_knob(parser, knobs.COMMANDS["idle_timeout"], default=IDLE_TIMEOUT)
    options.add_knob(parser, knobs.COMMANDS["max_in_flight"], default=MAX_IN_FLIGHT)
    options.add_knob(parser, knobs.COMMANDS["connection_queue_bytes"], default=QUEUE_BYTES)
    options.curve_server(parser, BRIDGE_ROLES)
    options.curve(parser, announced=False)
    parser.add_argument(
        "--allow-plaintext",
        action="store_true",
        help="relay plaintext clients to a CURVE broker (--curve-server-key without --curve-secret) with the "
        "bridge's key; refused without this flag",
    )
    parser.set_defaults(transport="server")


def run(args: argparse.Namespace) -> int:
    from generaldomo.errors import BridgeFailed
    from generaldomo.io.bridge import Bridge

    stop = options.stop_on_signals()
    bridge = Bridge(
        args.server,
        args.mdp_broker,
        heartbeat_interval=args.heartbeat_interval,
        liveness=args.liveness,
        idle_timeout=args.idle_timeout,
        security=options.security(args, BRIDGE_ROLES),
        upstream=options.peer_curve(args).curve(),
        allow_plaintext=args.allow_plaintext,
        max_in_flight=args.max_in_flight,
        connection_queue_bytes=args.connection_queue_bytes,
        on_failure=lambda error: stop.set(),
    )
    for endpoint in bridge.endpoints:
        print(f"generaldomo bridge: server {endpoint} -> MDP/0.1 broker {args.mdp_broker}", flush=True)
    bridge.start()
    try:
        options.wait_for_signal(stop, lambda: bridge.serving)
    finally:
        try:
            bridge.stop()
        except BridgeFailed as failed:
            print(f"generaldomo bridge: {failed}", file=sys.stderr, flush=True)
    return Exit.SERVE_FAILED if bridge.failure is not None else Exit.OK


COMMAND = Command(
    "bridge", "let generaldomo CLIENT peers use a standard MDP/0.1 broker", arguments, run,
    configurable=True, required=("server", "mdp_broker"),
)  # fmt: skip
