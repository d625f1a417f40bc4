"""Options several commands share, and what they mean once parsed.

This module owns the flags common to commands (transport, where the broker is, heartbeats), the CLI's own
defaults, and the process-life helpers (waiting for SIGINT/SIGTERM). Protocol defaults come from
:mod:`generaldomo.sansio.settings`. It knows nothing of what any one command does.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

from generaldomo.io.address_file import BROKER_FILE_VARIABLE
from generaldomo.io.beacon import BROKER_VARIABLE, find_broker
from generaldomo.sansio.settings import PeerSettings

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"
TRANSPORTS = ("router", "server")
REQUEST_TIMEOUT = 10.0  # seconds a command waits for its answer
FIND_TIMEOUT = 30.0  # seconds a peer waits for a broker file to appear or a beacon to be heard
PEER = PeerSettings()


def transport(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transport", choices=TRANSPORTS, default="router", help="socket type")


def timeout(parser: argparse.ArgumentParser, what: str = "the answer") -> None:
    parser.add_argument("--timeout", type=float, default=REQUEST_TIMEOUT, metavar="SECONDS", help=f"wait for {what}")


def heartbeats(parser: argparse.ArgumentParser, peer: str, defaults: PeerSettings = PEER) -> None:
    """``--heartbeat`` and ``--liveness``; use the same values on the broker and its peers."""
    parser.add_argument(
        "--heartbeat", type=float, default=defaults.heartbeat_interval, metavar="SECONDS", help="heartbeat interval"
    )
    parser.add_argument(
        "--liveness",
        type=int,
        default=defaults.liveness,
        metavar="N",
        help=f"missed heartbeats before {peer} is presumed gone",
    )


def connect(parser: argparse.ArgumentParser) -> None:
    """Where a peer finds its broker (see :func:`endpoint`)."""
    parser.add_argument(
        "--connect",
        metavar="ENDPOINT",
        help=f"broker endpoint (default: ${BROKER_VARIABLE}, else the broker "
        f"file, else a beacon with --discover, else {DEFAULT_ENDPOINT})",
    )
    parser.add_argument(
        "--broker-file",
        metavar="PATH",
        help=f"read the endpoint from the address file a broker writes with "
        f"--address-file, waiting for it to appear (default: ${BROKER_FILE_VARIABLE} if set)",
    )
    parser.add_argument("--discover", action="store_true", help="find the broker by its UDP beacon")
    parser.add_argument(
        "--name", metavar="NAME", help="with --discover: only a broker announcing this name (default: any)"
    )
    parser.add_argument(
        "--find-timeout",
        type=float,
        default=FIND_TIMEOUT,
        metavar="SECONDS",
        help="wait this long for the broker file to appear or a beacon to be heard",
    )


def endpoint(args: argparse.Namespace) -> str:
    """The broker endpoint the options of :func:`connect` name: the first of --connect, $GENERALDOMO_BROKER,
    --broker-file or $GENERALDOMO_BROKER_FILE, a beacon (only with --discover); else the default endpoint."""
    broker_file = args.broker_file or os.environ.get(BROKER_FILE_VARIABLE)
    if args.connect or os.environ.get(BROKER_VARIABLE) or broker_file or args.discover:
        found = find_broker(
            args.transport, args.connect, timeout=args.find_timeout, name=args.name, broker_file=args.broker_file
        )
    else:
        found = DEFAULT_ENDPOINT
        log.debug("no endpoint given, no %s, no broker file: using %s", BROKER_VARIABLE, found)
    return found


def stop_on_signals() -> threading.Event:
    """An event that SIGINT and SIGTERM set from now on (instead of ending the process)."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def wait_for_signal(stop: threading.Event | None = None) -> None:
    """Return on SIGINT or SIGTERM (or when ``stop``, made by :func:`stop_on_signals`, is set)."""
    stop = stop or stop_on_signals()
    while not stop.wait(1.0):
        pass
