"""What one subcommand of ``generaldomo`` is, and how help text shows defaults.

This module owns the shape every command module fills in: a name, a one-line help, a function that adds its
arguments and a function that runs it, returning one of the exit statuses below. It knows nothing of any
particular command.
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Callable

import attrs

__all__ = ["Command", "Exit", "HelpFormatter"]


class Exit(enum.IntEnum):
    """Exit statuses of every command (docs/reference/cli.rst)."""

    OK = 0
    FAILED = 1  # the broker answered the request with an error status, or no worker serves the service
    USAGE = 2  # a bad option value or set-up: no draft sockets, no broker found, a resolver that does not load
    NO_BROKER = 3  # nothing answered at the endpoint over the transport
    TIMED_OUT = 4  # a live broker with workers for the service did not answer in time (queued or running)
    BIND_FAILED = 5  # the broker or bridge could not bind an endpoint (in use, not allowed, no such address)
    SERVE_FAILED = 6  # the broker's or bridge's loop stopped because of an error: it could no longer serve
    INTERRUPTED = 130  # SIGINT


@attrs.frozen
class Command:
    """One subcommand: its arguments are added by ``arguments``; ``run`` returns the exit status."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str = ""  # longer text under the usage line; ``help`` when empty
    extra: str | None = None  # the list argument that takes positionals given after options (options in any order)
    configurable: bool = False  # its settings may come from GENERALDOMO_* variables and --config (cli.config)
    per_run: tuple[str, ...] = ()  # options of one run, not settings (neither from the environment nor the file)
    required: tuple[str, ...] = ()  # settings a run needs: from a flag, the environment or the file (checked after)
    hidden: tuple[str, ...] = ()  # secret settings: --print-config says whether they are set, not their value


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions kept as written (plain text); every meaningful default printed after its option's help."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or _says_nothing(action.default):
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{text} (default: %(default)s)".lstrip()
        return text


def _says_nothing(default: object) -> bool:
    """Defaults not worth printing (the option's help says what leaving it out means)."""
    return default is None or default is False or default is argparse.SUPPRESS or default == []
