"""``generaldomo doctor`` and ``--version``: versions, and whether draft sockets (CLIENT/SERVER) work.

This module owns that report; exit status 1 means no draft sockets.
"""

from __future__ import annotations

import argparse

import zmq

from generaldomo import __version__
from generaldomo.cli.command import Command, Exit
from generaldomo.io.transport import draft_available


def versions() -> str:
    """One line: generaldomo, pyzmq and libzmq versions, and draft support (with how to get it)."""
    draft = "yes" if draft_available() else "no (run: python tools/draft_pyzmq.py ensure)"
    found = f"generaldomo {__version__}; pyzmq {zmq.pyzmq_version()}; libzmq {zmq.zmq_version()}"
    return f"{found}; draft sockets (CLIENT/SERVER): {draft}"


def arguments(parser: argparse.ArgumentParser) -> None:
    """No arguments."""


def run(args: argparse.Namespace) -> int:
    print(versions())
    return Exit.OK if draft_available() else Exit.FAILED


COMMAND = Command("doctor", "report versions and draft-socket support", arguments, run)
