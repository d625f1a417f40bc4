"""``generaldomo flow``: show or change a service's flow limits (``mmi.flow``).

This module owns the flow command's flags; only the limits given on the line are changed (``--tenant``: only
the tenants it names). Its connection settings may also come from ``--config`` and ``GENERALDOMO_*`` variables
(:mod:`generaldomo.cli.config`); the limits and ``--create`` belong to one run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from generaldomo.cli import options, probe
from generaldomo.cli.command import Command, Exit
from generaldomo.errors import RequestFailed
from generaldomo.peers.client import Client
from generaldomo.sansio.broker.flow.flow import FLOW
from generaldomo.sansio.config import knobs
from generaldomo.sansio.wire import protocol

__all__ = ["COMMAND", "FLOW_KEYS", "arguments", "run"]


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    parser.add_argument(
        "service", nargs="?", help="the service whose limits to show or change (needed but for --print-config)"
    )
    options.connect(parser)
    options.wait_for_broker(parser)
    options.curve(parser)
    unset = argparse.SUPPRESS  # options left out are absent from the namespace, so they are not changed
    for knob in FLOW:
        if knob.kind is knobs.Kind.TENANTS:
            more = f"{knob.help} (repeatable; default: unchanged)"
            options.add_knob(parser, knob, default=unset, type=_tenant, action="append", help=more)
        else:
            options.add_knob(parser, knob, default=unset, help=f"{knob.help} (default: unchanged)")
    options.timeout(parser, "the answer")
    parser.add_argument(
        "--create",
        action="store_true",
        help="change the limits even if no worker serves the service (they apply when one comes)",
    )


def _tenant(text: str) -> tuple[str, dict[str, Any] | None]:
    """``NAME=KEY=VALUE,...`` (or ``NAME=none``) as a tenant name and its limits in ``mmi.flow``'s JSON."""
    name, sep, spec = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"a tenant is NAME=KEY=VALUE,... or NAME=none, not {text!r}")
    try:
        return name, knobs.tenant_limits(name, spec)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


FLOW_KEYS = tuple(knob.name for knob in FLOW if knob.kind is not knobs.Kind.TENANTS)  # namespace keys


def run(args: argparse.Namespace) -> int:
    if args.service is None:
        raise ValueError("generaldomo flow needs the SERVICE whose limits to show or change")
    changes: dict[str, object] = {key: getattr(args, key) for key in FLOW_KEYS if hasattr(args, key)}
    if hasattr(args, "tenants"):
        changes["tenants"] = dict(args.tenants)
    target = options.peer(args)
    endpoint = target.endpoint
    with Client(endpoint, args.transport, fail_unreachable=args.fail_unreachable, **target.curve.kwargs()) as client:
        try:
            if changes and not args.create and not _served(client, args.service, args.timeout):
                known = probe.services(endpoint, args.transport, probe.TIMEOUT, target.curve.curve())
                nearest = probe.nearest(args.service, known)
                hint = f"; did you mean {nearest!r}?" if nearest else ""
                print(
                    f"generaldomo flow: no worker serves {args.service!r} (services with workers: "
                    f"{', '.join(known) or 'none'}){hint}; give --create to set its limits anyway",
                    file=sys.stderr,
                )
                return Exit.FAILED
            print(json.dumps(client.flow(args.service, timeout=args.timeout, **changes)))
        except RequestFailed as error:
            print(f"generaldomo flow: {error}", file=sys.stderr)
            return Exit.FAILED
        except TimeoutError:  # the broker itself answers mmi.flow
            print(f"generaldomo flow: {probe.nobody_answered(endpoint, args.transport, args.timeout)}", file=sys.stderr)
            return Exit.NO_BROKER
    return Exit.OK


def _served(client: Client, service: str, timeout: float) -> bool:
    """Whether ``mmi.service`` says a worker serves ``service`` (True too when the resolver cannot tell)."""
    try:
        return client.request("mmi.service", [service.encode()], timeout).payload != protocol.NOT_FOUND
    except RequestFailed:  # e.g. a resolver whose descriptions are not plain names
        return True


COMMAND = Command(
    "flow", "show or change a service's flow limits (mmi.flow)", arguments, run,
    configurable=True, per_run=(*(knob.name for knob in FLOW), "create"),  # the limits: what this run changes
)  # fmt: skip
