"""The generaldomo command: one subcommand per module of this package, registered in COMMANDS.

This module owns the top-level parser (``--version``, ``-v``), logging, and turning errors into exit statuses
(:class:`generaldomo.cli.command.Exit`: set-up errors give ``USAGE``, an endpoint that cannot be bound
``BIND_FAILED``, Ctrl-C ``INTERRUPTED``). To add a
command, write a module with a ``COMMAND`` and list it below. Every command runs the public Python API. A
``configurable`` command's settings left out on the command line come from the environment and ``--config``
(:mod:`generaldomo.cli.config`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import zmq

from generaldomo.cli import (
    bridge,
    broker,
    client,
    config,
    dashboard,
    dead,
    demo,
    doctor,
    flow,
    keygen,
    logs,
    status,
    worker,
)  # fmt: skip
from generaldomo.cli.command import Command, Exit, HelpFormatter
from generaldomo.cli.options import scrub, secrets
from generaldomo.errors import AppSpecError, DiscoveryError, DraftUnavailable, HandshakeFailed
from generaldomo.io.transport import BindError, require_draft

__all__ = ["COMMANDS", "DESCRIPTION", "main", "parse", "parser", "settings_table"]

COMMANDS: tuple[Command, ...] = tuple(
    module.COMMAND for module in (broker, worker, client, demo, doctor, status, flow, dead, dashboard, bridge, keygen)
)
DESCRIPTION = """\
A task broker on ZeroMQ: clients send requests, the broker hands them to
workers of the right service.

Run "generaldomo COMMAND --help" for the options of one command. -v logs more
(-vv: debug, with a line per task on workers and per dispatch on brokers);
--log-format json and --log-file PATH change how and where. They may be
given before or after the command.
"""
_ERRORS = (
    DraftUnavailable,
    AppSpecError,
    ValueError,
    TypeError,
    ImportError,
    AttributeError,
    OSError,
    zmq.ZMQError,
    DiscoveryError,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = parse(parser(_chosen(sys.argv[1:] if argv is None else argv)), argv)
    verbosity = args.verbose + getattr(args, "more_verbose", 0)
    try:
        logs.configure(verbosity, args.log_format, args.log_file)
    except OSError as error:
        print(f"generaldomo: cannot write the log file: {error}", file=sys.stderr)
        return Exit.USAGE
    try:
        if args.command.configurable and _configure(args, argv):
            return Exit.OK  # --print-config
        if getattr(args, "transport", None) == "server":
            require_draft()
        return int(args.command.run(args))
    except BindError as error:
        print(scrub(f"generaldomo {args.command.name}: {error}", args), file=sys.stderr)
        return Exit.USAGE if error.malformed else Exit.BIND_FAILED
    except HandshakeFailed as error:  # nothing accepts connections there, the other transport, or CURVE missing,
        # unwanted or with the wrong key
        print(f"generaldomo {args.command.name}: {error}", file=sys.stderr)
        return Exit.NO_BROKER
    except BrokenPipeError:  # the reader went away (`generaldomo status --watch 1 | head`): end quietly
        from generaldomo.io import files  # on first use: short commands import little

        files.discard(sys.stdout.fileno())  # the exit's flush must not fail again
        return Exit.OK
    except _ERRORS as error:
        print(scrub(f"generaldomo: {error}", args), file=sys.stderr)
        return Exit.USAGE
    except KeyboardInterrupt:  # Ctrl-C on a command that installs no handler of its own (client, status)
        return Exit.INTERRUPTED


def _configure(args: argparse.Namespace, argv: Sequence[str] | None) -> bool:
    """Fill in the settings the command line leaves out from the environment and the configuration file
    (:mod:`generaldomo.cli.config`); with ``--print-config``, print them: True then (the command is done)."""
    command: Command = args.command
    environ = os.environ
    options = config.options_of(_SUBPARSERS[command.name], command.per_run)
    path = config.config_path(args, environ)
    file: dict[str, tuple[object, str]] = {}
    if path is not None:
        parser()  # every command's settings, to tell a key of another command's from a mistake
        known = {
            c.name: {o.key for o in config.options_of(_SUBPARSERS[c.name], c.per_run)}
            for c in COMMANDS
            if c.configurable
        }
        file = config.file_values(path, config.read_file(path), command.name, options, known)
    resolved = config.resolve(options, args, _given(command, argv), file, environ)
    if args.print_config:
        hidden = (*command.hidden, *secrets(args))
        print(config.render(command.name, resolved, hidden), end="", flush=True)
        return True
    missing = config.missing(resolved, command.required)
    if missing:
        _SUBPARSERS[command.name].error(f"{missing} (a flag, a GENERALDOMO_* variable or a --config file's key)")
    return False


def settings_table() -> str:
    """The guide's table of every setting of the configurable commands (:func:`generaldomo.cli.config.table`)."""
    parser()
    return config.table({c.name: config.options_of(_SUBPARSERS[c.name], c.per_run) for c in COMMANDS if c.configurable})


def _given(command: Command, argv: Sequence[str] | None) -> set[str]:
    """The destinations of the options given on the command line (a parse in which nothing has a default)."""
    top = parser(command.name)
    sub = _SUBPARSERS[command.name]
    for action in sub._actions:  # argparse keeps its actions there; it has no public listing of them
        action.default = argparse.SUPPRESS
    given = vars(top.parse_known_args(argv)[0])
    parser(command.name)  # the subparsers of the command line's own parser again (for its error messages)
    return set(given)


def _log_options(parser: argparse.ArgumentParser, default: object) -> None:
    """``--log-format`` and ``--log-file``, before or after the command (absent ones keep the defaults)."""
    parser.add_argument(
        "--log-format", choices=logs.FORMATS, default=default, help="log lines as text or JSON (default: text)"
    )
    parser.add_argument("--log-file", metavar="PATH", default=default, help="append the log to PATH (default: stderr)")


def parse(top: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The parsed command line. Positionals left over after options (``client fft --timeout 3 x``) go to the
    command's ``extra`` list, in order; anything else left over is an error in the command's own usage."""
    args, rest = top.parse_known_args(argv)
    args.log_format = getattr(args, "log_format", "text")
    args.log_file = getattr(args, "log_file", None)
    if rest:
        command: Command = args.command
        if command.extra is None or any(word.startswith("-") for word in rest if word != "-"):
            _SUBPARSERS[command.name].error(f"unrecognized arguments: {' '.join(rest)}")
        getattr(args, command.extra).extend(rest)
    return args


_SUBPARSERS: dict[str, argparse.ArgumentParser] = {}


def _chosen(argv: Sequence[str]) -> str:
    """The command ``argv`` runs: its first word that names one and is no option's value ("" when none does:
    ``--version``, ``--help`` or a mistyped command need no command's arguments)."""
    names = {command.name for command in COMMANDS}
    for before, word in zip([None, *argv], argv, strict=False):
        if before in _VALUED or word.startswith("-"):
            continue
        return word if word in names else ""
    return ""


_VALUED = ("--log-format", "--log-file")  # the options before the command that take a value


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of the whole command line, with one subparser per entry of COMMANDS; with ``only``, the
    others without their arguments (so that a command loads only what its own arguments need)."""
    top = argparse.ArgumentParser(prog="generaldomo", description=DESCRIPTION, formatter_class=HelpFormatter)
    top.add_argument("--version", action="version", version=doctor.versions())
    top.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more: -v info, -vv debug (default: warnings only)"
    )
    _log_options(top, argparse.SUPPRESS)
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
        _log_options(sub, argparse.SUPPRESS)
        if only is None or command.name == only:
            command.arguments(sub)
            if command.configurable:
                config.arguments(sub)
        sub.set_defaults(command=command)
        _SUBPARSERS[command.name] = sub
    return top


if __name__ == "__main__":
    sys.exit(main())
