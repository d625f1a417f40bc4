"""``generaldomo flow``: show or change a service's flow limits (``mmi.flow``).

This module owns the flow command's flags; only the limits given on the line are changed (``--tenant``: only
the tenants it names).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from generaldomo.cli import options, probe
from generaldomo.cli.broker import bounds, limit
from generaldomo.cli.command import Command, Exit
from generaldomo.peers.client import Client, RequestFailed
from generaldomo.sansio import protocol


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    parser.add_argument("service")
    options.connect(parser)
    options.curve(parser)
    unset = argparse.SUPPRESS  # options left out are absent from the namespace, so they are not changed
    for flag, kind, metavar, text in FLAGS:
        parser.add_argument(flag, type=kind, default=unset, metavar=metavar, help=text)
    parser.add_argument(
        "--tenant",
        type=_tenant,
        action="append",
        default=unset,
        metavar="NAME=KEY=VALUE,...",
        help="a tenant's share and limits: weight (default 1), rate, burst, concurrency, e.g. "
        "alice=weight=3,concurrency=8; NAME=none forgets them; the name '*' sets every other tenant's "
        "(repeatable; default: unchanged)",
    )
    options.timeout(parser, "the answer")
    parser.add_argument(
        "--create",
        action="store_true",
        help="change the limits even if no worker serves the service (they apply when one comes)",
    )


def _tenant(text: str) -> tuple[str, dict[str, float] | None]:
    """``NAME=KEY=VALUE,...`` (or ``NAME=none``) as a tenant name and its limits in ``mmi.flow``'s JSON."""
    name, sep, spec = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"a tenant is NAME=KEY=VALUE,... or NAME=none, not {text!r}")
    if spec.lower() == "none":
        return name, None
    limits: dict[str, float] = {}
    for pair in spec.split(","):
        key, sep, value = pair.partition("=")
        if not sep or key not in ("weight", "rate", "burst", "concurrency"):
            raise argparse.ArgumentTypeError(f"tenant limits are weight, rate, burst, concurrency, not {pair!r}")
        try:
            limits[key] = float(value) if key == "rate" else int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{key} of tenant {name!r} is a number, not {value!r}") from None
    return name, limits


def _bounds(text: str) -> dict[str, int] | None:
    """``MIN..MAX`` as the JSON bounds ``mmi.flow`` takes, or None ('none': off)."""
    try:
        limits = bounds(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return None if limits is None else {"min": limits.min, "max": limits.max}


def _rate_bounds(text: str) -> dict[str, float | None] | None:
    """``MIN..MAX`` (MAX may be left out) as the JSON bounds of ``mmi.flow``'s ``backoff``, or None ('none':
    the defaults)."""
    if text.lower() == "none":
        return None
    low, sep, high = text.partition("..")
    try:
        if not sep:
            raise ValueError
        return {"min": float(low), "max": float(high) if high else None}
    except ValueError:
        message = f"backoff bounds are MIN..MAX or MIN.. (per second) or none, not {text!r}"
        raise argparse.ArgumentTypeError(message) from None


# (flag, parser, metavar, help) of each limit; the namespace key is the flag's name
FLAGS: tuple[tuple[str, Callable[[str], Any], str, str], ...] = (
    ("--rate", limit(float), "PER_SECOND", "dispatches per second; 'none' lifts it (default: unchanged)"),
    ("--burst", int, "N", "dispatches allowed back to back (default: unchanged; a new limit starts at 1)"),
    ("--concurrency", limit(int), "N", "tasks in flight at once; 'none' lifts it (default: unchanged)"),
    (
        "--bytes-in-flight",
        limit(int),
        "BYTES",
        "request bytes in flight at once (a larger task goes alone); 'none' lifts it (default: unchanged)",
    ),
    (
        "--adaptive",
        _bounds,
        "MIN..MAX",
        "adapt the concurrency cap to service times within these bounds; 'none' turns it off (default: unchanged)",
    ),
    (
        "--backoff",
        _rate_bounds,
        "MIN..MAX",
        "bounds (per second; MAX may be left out) of the dispatch rate adapted to the workers' 429 answers; "
        "'none': the defaults, 0.1.. (default: unchanged)",
    ),
)
LIMITS = tuple(flag[2:].replace("-", "_") for flag, *_ in FLAGS)


def run(args: argparse.Namespace) -> int:
    changes: dict[str, object] = {key: getattr(args, key) for key in LIMITS if hasattr(args, key)}
    if hasattr(args, "tenant"):
        changes["tenants"] = dict(args.tenant)
    target = options.peer(args)
    endpoint = target.endpoint
    with Client(endpoint, args.transport, **target.curve.kwargs()) as client:
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


COMMAND = Command("flow", "show or change a service's flow limits (mmi.flow)", arguments, run)
