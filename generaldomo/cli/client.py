"""``generaldomo client``: send one request, print the reply's frames one a line.

This module owns the client command's flags, its output and its exit status. When no reply comes within
``--timeout``, it finds out why (see :mod:`generaldomo.cli.probe`, at most ``PROBE_TIMEOUT`` seconds more per
question) and says so, with an exit status of its own: nothing answers at the endpoint over this transport
(and whether something does over the other one); no worker serves the service (with the services that have
workers, and the nearest name); or the broker is alive and has workers, so the request is queued or running.
The request itself goes through :class:`generaldomo.peers.client.Client`, unchanged, which withdraws it
(CANCEL) when ``--timeout`` passes or on Ctrl-C, so an abandoned request never runs later.
"""

from __future__ import annotations

import argparse
import sys

from generaldomo.cli import options, probe
from generaldomo.cli.command import Command, Exit
from generaldomo.io.connection import Curve
from generaldomo.peers.client import Client, RequestFailed

PROBE_TIMEOUT = probe.TIMEOUT  # seconds per diagnostic question after a timeout


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    options.connect(parser)
    options.timeout(parser, "the reply")
    options.heartbeats(parser, "the broker")
    options.curve(parser)
    parser.add_argument("service", help="request description (a service name with the default resolver)")
    parser.add_argument("payload", nargs="*", help="payload frames (UTF-8; default: one empty frame)")


def run(args: argparse.Namespace) -> int:
    target = options.peer(args)
    endpoint, curve = target.endpoint, target.curve
    with Client(
        endpoint, args.transport, heartbeat_interval=args.heartbeat, liveness=args.liveness, **curve.kwargs()
    ) as client:
        try:
            reply = client.request(args.service, [p.encode() for p in args.payload], timeout=args.timeout)
        except RequestFailed as error:
            return _fail(Exit.FAILED, f"request failed: {error}")
        except TimeoutError as error:
            return _why_no_reply(args, endpoint, str(error), curve.curve())
    for frame in reply.frames:
        print(frame.decode(errors="replace"))
    return Exit.OK


def _fail(status: Exit, message: str) -> Exit:
    print(f"generaldomo client: {message}", file=sys.stderr)
    return status


def _why_no_reply(args: argparse.Namespace, endpoint: str, no_reply: str, curve: Curve | None) -> Exit:
    """Ask the broker why no reply came (the request itself was cancelled when request() timed out)."""
    if probe.broker_instance(endpoint, args.transport, PROBE_TIMEOUT, curve) is None:
        waited = args.timeout + PROBE_TIMEOUT
        return _fail(Exit.NO_BROKER, probe.nobody_answered(endpoint, args.transport, waited, curve))
    served = probe.served(endpoint, args.transport, args.service, PROBE_TIMEOUT, curve)
    if served is None:
        return _fail(Exit.TIMED_OUT, f"{no_reply}; the broker at {endpoint} answers heartbeats but not mmi.service")
    if not served:
        known = probe.services(endpoint, args.transport, PROBE_TIMEOUT, curve)
        nearest = probe.nearest(args.service, known)
        listed = ", ".join(known) or "none"
        hint = f"; did you mean {nearest!r}?" if nearest else ""
        return _fail(
            Exit.FAILED,
            f"{no_reply}: no worker serves {args.service!r} at {endpoint} (mmi.service says 404); services with "
            f"workers: {listed}{hint}",
        )
    return _fail(
        Exit.TIMED_OUT,
        f"{no_reply}; the broker at {endpoint} answers and has workers for it, so the request is still queued or "
        f"running (see: generaldomo status --transport {args.transport} {endpoint})",
    )


DESCRIPTION = f"""\
Send one request and print the reply, one frame a line. If no reply comes
within --timeout, ask the broker why (up to {PROBE_TIMEOUT:g} s per question) and say so.

exit status:
  0  the reply was printed
  1  an error status, or no worker serves the service (mmi.service: 404)
  2  a usage or set-up error
  3  no broker answered at the endpoint over this transport
  4  the broker has workers for the service; the request is queued or running
"""
COMMAND = Command("client", "send one request and print the reply", arguments, run, DESCRIPTION)
