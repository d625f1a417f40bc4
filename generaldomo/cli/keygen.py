"""``generaldomo keygen NAME``: make a CURVE key pair as ZeroMQ certificate files.

This module owns the keygen command's flags; the files are :func:`generaldomo.io.keys.keygen`'s
(``DIR/NAME.key`` public, ``DIR/NAME.key_secret`` secret, mode 0600 from its creation), with ``--services``
as the certificate's metadata and ``--role`` copying the public certificate into the broker's allowlist
directories.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from generaldomo.cli.command import Command, Exit
from generaldomo.io import files, keys
from generaldomo.io.keys import keygen

__all__ = ["COMMAND", "ROLES", "arguments", "run"]

ROLES = ("clients", "workers", "admins")


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="file stem: NAME.key (public) and NAME.key_secret (secret)")
    parser.add_argument("--dir", default=".", metavar="DIR", help="where to write the two files")
    parser.add_argument(
        "--services",
        metavar="PATTERN,...",
        help="worker keys: the services it may register for (shell-style patterns; default: any)",
    )
    parser.add_argument(
        "--role",
        action="append",
        default=[],
        choices=ROLES,
        help="copy the public certificate into DIR/ROLE/ too, the broker's --clients/--workers/--admins "
        "directories (repeatable; default: none)",
    )
    parser.add_argument("--force", action="store_true", help="replace existing files of that name")


def run(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    names = (directory / f"{args.name}.key", directory / f"{args.name}.key_secret")
    existing = [p for p in names if os.path.lexists(p)]  # a link, even dangling, is replaced, never written through
    if existing and not args.force:
        raise ValueError(f"{existing[0]} exists; use --force to replace it")
    public, secret = keygen(directory, args.name, {"services": args.services} if args.services else None)
    print(f"generaldomo keygen: public {public}", flush=True)
    print(f"generaldomo keygen: secret {secret} (keep it private)", flush=True)
    for role in args.role:
        files.make_directory(directory / role, 0o755)
        copy = directory / role / public.name
        files.write(copy, files.read(public, keys.PUBLIC), "CURVE certificate", 0o644)
        print(f"generaldomo keygen: {role} {copy}", flush=True)
    return Exit.OK


COMMAND = Command("keygen", "make a CURVE key pair (ZeroMQ certificate files)", arguments, run)
