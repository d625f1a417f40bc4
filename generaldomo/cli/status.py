"""``generaldomo status``: print a broker's ``mmi.status`` report, once or every few seconds.

This module owns the status command's flags, the width it fits the report in, how it gathers the report's
pages (every service and worker, up to :data:`MOST` of each) and its exit status; the layout of the report is
:mod:`generaldomo.cli.status_view`'s. Its connection settings may also come from ``--config`` and
``GENERALDOMO_*`` variables (:mod:`generaldomo.cli.config`); what it shows belongs to one run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from typing import Any

from generaldomo.cli import options, probe
from generaldomo.cli.command import Command, Exit
from generaldomo.cli.status_view import WIDTH, render
from generaldomo.peers.client import Client
from generaldomo.sansio.config import knobs

__all__ = ["COMMAND", "MIN_COLUMNS", "MOST", "PAGE_SIZE", "arguments", "columns", "gather", "run", "width"]

MIN_COLUMNS = 40  # narrower than this, tables would be mostly cut
PAGE_SIZE = 500  # services and workers asked for per mmi.status request
MOST = 10_000  # services and workers shown at most (the header says how many there are)


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    options.connect(parser)
    options.wait_for_broker(parser)
    options.curve(parser)
    parser.add_argument("endpoint", nargs="?", help="broker endpoint (same as --connect)")
    parser.add_argument("--json", action="store_true", help="print the raw JSON report")
    width = parser.add_mutually_exclusive_group()
    width.add_argument(
        "--columns",
        type=columns,
        metavar="N",
        help=f"fit the report in N columns (default: the terminal's width, or {WIDTH} when not a terminal)",
    )
    width.add_argument("--wide", action="store_true", help="as wide as the report takes: nothing cut")
    options.add_knob(parser, knobs.COMMANDS["watch"])
    parser.add_argument("--service", metavar="NAME", help="only this service and its workers (default: all)")
    options.timeout(parser, "the report")


def columns(text: str) -> int:
    """A ``--columns`` value: a width of at least :data:`MIN_COLUMNS`."""
    value = int(text)
    if value < MIN_COLUMNS:
        raise argparse.ArgumentTypeError(f"at least {MIN_COLUMNS} columns")
    return value


def width(args: argparse.Namespace) -> int | None:
    """The width to fit the report in: as asked, else the terminal's when printing to one, else the default."""
    if args.wide:
        return None
    if args.columns is not None:
        return int(args.columns)
    if sys.stdout.isatty():
        return max(MIN_COLUMNS, shutil.get_terminal_size((WIDTH, 24)).columns)
    return WIDTH


def run(args: argparse.Namespace) -> int:
    if not args.connect and args.endpoint:
        args.connect = [args.endpoint]
    target = options.peer(args)
    endpoint = target.endpoint
    fit = width(args)
    with Client(endpoint, args.transport, fail_unreachable=args.fail_unreachable, **target.curve.kwargs()) as client:
        while True:
            try:
                report = gather(client, args.timeout, args.service)
            except TimeoutError:  # the broker itself answers mmi.status
                print(
                    f"generaldomo status: {probe.nobody_answered(endpoint, args.transport, args.timeout)}",
                    file=sys.stderr,
                )
                return Exit.NO_BROKER
            if args.service is not None and not any(s["name"] == args.service for s in report["services"]):
                print(f"generaldomo status: {_unknown(client, args.service, endpoint, args.timeout)}", file=sys.stderr)
                return Exit.FAILED
            print(json.dumps(report, indent=2) if args.json else render(report, fit), flush=True)
            if args.watch is None:
                return Exit.OK
            try:
                time.sleep(args.watch)
            except KeyboardInterrupt:
                return Exit.OK
            print()


def _unknown(client: Client, service: str, endpoint: str, timeout: float | None) -> str:
    """What to say of a ``--service`` the broker does not know: the services it knows, and the nearest name."""
    known = [s["name"] for s in gather(client, timeout)["services"]]
    nearest = probe.nearest(service, known)
    hint = f"; did you mean {nearest!r}?" if nearest else ""
    listed = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "") or "none"
    return f"the broker at {endpoint} has no service {service!r} (its services: {listed}){hint}"


def gather(client: Client, timeout: float | None, service: str | None = None, most: int = MOST) -> dict[str, Any]:
    """The broker's report with every service and worker (at most ``most`` of each), page by page; the totals
    in its ``broker`` say how many there are."""
    scope = {} if service is None else {"service": service}
    report = client.status(timeout, limit=PAGE_SIZE, **scope)
    services, workers = report["services"], report["workers"]
    for _ in range(2 * most // PAGE_SIZE):
        cursors = report.get("next") or {}
        more_services = cursors.get("services_after") is not None and len(services) < most
        more_workers = cursors.get("workers_after") is not None and len(workers) < most
        if not (more_services or more_workers):
            break
        # a list that is complete (or long enough) goes on after its last item: an empty page
        after = {
            "services_after": cursors["services_after"]
            if more_services
            else services[-1]["name"]
            if services
            else None,
            "workers_after": cursors["workers_after"] if more_workers else workers[-1]["serial"] if workers else None,
        }
        report = client.status(timeout, limit=PAGE_SIZE, **scope, **after)
        services += report["services"]
        workers += report["workers"]
    return {**report, "services": services[:most], "workers": workers[:most]}


COMMAND = Command(
    "status", "show a broker's status (mmi.status)", arguments, run,
    configurable=True, per_run=("json", "columns", "wide", "watch", "service"),  # what this run shows, and how
)  # fmt: skip
