"""``generaldomo doctor`` and ``--version``: versions, whether draft sockets (CLIENT/SERVER) work, whether the
broker links run on the C accelerator or in pure Python (:mod:`generaldomo.io.speedups`), whether the sans-IO core
runs compiled or in pure Python (:mod:`generaldomo.compiled`), and whether SERVER links
bind real ``inproc://`` endpoints (:mod:`generaldomo.io.inproc`), and which cryptography library CURVE runs on
(:mod:`generaldomo.io.crypto`).

This module owns that report. A missing optional feature (draft sockets: the server transport) is a warning in
it, not a failure: the exit status is 0 whenever the report could be made. ``--install-draft`` runs the packaged
installer (:mod:`generaldomo.draft`), which says what it will replace before it does.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import zmq

from generaldomo import __version__, compiled
from generaldomo.cli.command import Command, Exit
from generaldomo.io import inproc, speedups
from generaldomo.io.crypto import curve_library
from generaldomo.io.transport import draft_available, install_command

__all__ = ["COMMAND", "arguments", "core_path", "run", "versions"]


def versions() -> str:
    """One line: generaldomo, pyzmq and libzmq versions, and draft support (with how to get it)."""
    draft = "yes" if draft_available() else f"no (run: {install_command()}, or generaldomo doctor --install-draft)"
    found = f"generaldomo {__version__}; pyzmq {zmq.pyzmq_version()}; libzmq {zmq.zmq_version()}"
    return f"{found}; draft sockets (CLIENT/SERVER): {draft}"


def core_path() -> str:
    """Which path the sans-IO core runs, as the build decided (:mod:`generaldomo.compiled`) and as its modules are
    imported: the broker core's (or, when a build lacks it, the build's first) from the build's folder or from
    its source."""
    manifest = compiled.state()[0]
    name = "generaldomo.sansio.broker.core.core"
    if manifest is not None and name not in manifest.modules:
        name = min(manifest.modules)
    imported = Path(importlib.import_module(name).__file__ or "")
    if (imported.suffix != ".py") != compiled.in_use():
        return f"{compiled.description()}, but {name} was imported from {imported}"
    return compiled.description()


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--install-draft",
        action="store_true",
        help="build (or take from the cache) and install a draft-enabled pyzmq into this environment",
    )


def run(args: argparse.Namespace) -> int:
    if args.install_draft:
        from generaldomo import draft

        return draft.main(["ensure"])
    print(versions())
    print(f"broker links: {speedups.description}")
    print(f"sans-IO core: {core_path()}")
    how = "real inproc (libzmq patch 'mailbox')" if inproc.NATIVE else "carried over private ipc (a stock libzmq)"
    print(f"SERVER links' inproc:// endpoints: {how}")
    print(f"CURVE cryptography: {curve_library()}")
    if not draft_available():
        print(
            "warning: the server transport (CLIENT/SERVER sockets) is not available with this pyzmq; the router "
            f"transport works. To add it: {install_command()}"
        )
    return Exit.OK


COMMAND = Command("doctor", "report versions and draft-socket support", arguments, run)
