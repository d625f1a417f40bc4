"""The generaldomo command: one subcommand per module of this package, registered in COMMANDS.

This module owns the top-level parser (``--version``, ``-v``), logging, and turning errors into exit statuses
(:class:`generaldomo.cli.command.Exit`: set-up errors give ``USAGE``, Ctrl-C ``INTERRUPTED``). To add a
command, write a module with a ``COMMAND`` and list it below. Every command runs the public Python API.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import zmq

from generaldomo.cli import bridge, broker, client, dashboard, demo, doctor, flow, keygen, status, worker
from generaldomo.cli.command import Command, Exit, HelpFormatter
from generaldomo.io.beacon import DiscoveryError
from generaldomo.io.transport import DraftUnavailable, require_draft

COMMANDS: tuple[Command, ...] = tuple(
    module.COMMAND for module in (broker, worker, client, demo, doctor, status, flow, dashboard, bridge, keygen)
)
DESCRIPTION = """\
A task broker on ZeroMQ: clients send requests, the broker hands them to
workers of the right service.

Run "generaldomo COMMAND --help" for the options of one command. -v logs more
(-vv: debug); it may be given before or after the command.
"""
_ERRORS = (DraftUnavailable, ValueError, TypeError, ImportError, AttributeError, OSError, zmq.ZMQError, DiscoveryError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = parser().parse_args(argv)
    verbosity = args.verbose + getattr(args, "more_verbose", 0)
    logging.basicConfig(
        level=logging.DEBUG if verbosity > 1 else logging.INFO if verbosity else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        if getattr(args, "transport", None) == "server":
            require_draft()
        return int(args.command.run(args))
    except _ERRORS as error:
        print(f"generaldomo: {error}", file=sys.stderr)
        return Exit.USAGE
    except KeyboardInterrupt:  # Ctrl-C on a command that installs no handler of its own (client, status)
        return Exit.INTERRUPTED


def parser() -> argparse.ArgumentParser:
    """The parser of the whole command line, with one subparser per entry of COMMANDS."""
    top = argparse.ArgumentParser(prog="generaldomo", description=DESCRIPTION, formatter_class=HelpFormatter)
    top.add_argument("--version", action="version", version=doctor.versions())
    top.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more: -v info, -vv debug (default: warnings only)"
    )
    commands = top.add_subparsers(title="commands", required=True, metavar="COMMAND")
    for command in COMMANDS:
        sub = commands.add_parser(
            command.name,
            help=command.help,
            description=command.description or command.help,
            formatter_class=HelpFormatter,
        )
        # Counted apart from the top-level -v: a subparser's defaults would overwrite the top-level count.
        sub.add_argument(
            "-v",
            "--verbose",
            dest="more_verbose",
            action="count",
            default=argparse.SUPPRESS,
            help="log more: -v info, -vv debug (default: warnings only)",
        )
        command.arguments(sub)
        sub.set_defaults(command=command)
    return top


if __name__ == "__main__":
    sys.exit(main())
