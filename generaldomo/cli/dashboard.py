"""``generaldomo dashboard``: serve the broker's live dashboard (a web page) from a process of its own.

This module owns the dashboard command's flags: where the page listens (``--http``, loopback by default), the
token that anything beyond loopback needs, the host names it answers to, and whether the page may change flow
limits. The page itself is :mod:`generaldomo.dashboard`'s (the ``generaldomo[dashboard]`` extra); this module
imports it only when the command runs. Its settings may also come from ``--config`` and ``GENERALDOMO_*``
variables (:mod:`generaldomo.cli.config`); ``--print-config`` does not show the token.
"""

from __future__ import annotations

import argparse
import os
import socket
from urllib.parse import quote

from generaldomo.cli import options
from generaldomo.cli.command import Command, Exit
from generaldomo.sansio.config import knobs

__all__ = [
    "BACKLOG",
    "COMMAND",
    "DEFAULT_HTTP",
    "DESCRIPTION",
    "MAX_STREAMS",
    "MAX_STREAMS_PER_CLIENT",
    "TOKEN_VARIABLE",
    "arguments",
    "listen_address",
    "run",
]

DEFAULT_HTTP = "127.0.0.1:8077"
MAX_STREAMS = 64  # generaldomo.dashboard.feed's (that module needs the extra; this one is imported by every command)
MAX_STREAMS_PER_CLIENT = 8
TOKEN_VARIABLE = options.DASHBOARD_TOKEN
BACKLOG = 128
DESCRIPTION = """\
Serve a live web page of a broker's services, workers, queues and flow limits,
refreshed about once a second from mmi.status (one request per interval,
however many pages watch). The page listens on loopback unless told otherwise;
anywhere else it needs a token (--token, or a fresh one printed with the
address). The page may change flow limits only with --allow-control, or under
CURVE with a key the broker gives the admin role.
"""


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    options.connect(parser)
    options.curve(parser)
    parser.add_argument(
        "--http",
        default=DEFAULT_HTTP,
        metavar="HOST:PORT",
        help="where the page listens (port 0: any free port; the address is printed)",
    )
    parser.add_argument(
        "--token",
        help="a secret every request must carry (at least 16 printable characters, spaces allowed but not at its "
        f"ends; default: ${TOKEN_VARIABLE}; else none on loopback and a fresh one elsewhere); a flag is seen by "
        f"every local user (ps, /proc/PID/cmdline): prefer ${TOKEN_VARIABLE} or token in a --config file only you "
        "can read",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name the page may be reached by besides the loopback ones and --http's (repeatable; default: "
        "none)",
    )
    parser.add_argument(
        "--allow-control", action="store_true", help="let the page change flow limits (needs the admin role)"
    )
    options.add_knob(parser, knobs.COMMANDS["interval"], default=1.0)
    # keys of their own: ``services`` and ``workers`` would be the broker's (a file's top-level keys are shared)
    options.add_knob(parser, knobs.COMMANDS["shown_services"], default=50)
    options.add_knob(parser, knobs.COMMANDS["shown_workers"], default=200)
    options.add_knob(parser, knobs.COMMANDS["max_streams"], default=MAX_STREAMS)
    options.add_knob(parser, knobs.COMMANDS["max_streams_per_client"], default=MAX_STREAMS_PER_CLIENT)
    options.timeout(parser, "each status report")


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for IPv6) as a host and a port; ValueError when it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--http wants HOST:PORT, not {text!r}")
    return host.strip("[]"), int(port)


def run(args: argparse.Namespace) -> int:
    from generaldomo.dashboard import Dashboard  # says which extra is missing
    from generaldomo.dashboard.guard import is_loopback, new_token

    try:
        import uvicorn
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(f"{error}: pip install 'generaldomo[dashboard]'", name=error.name) from error

    host, port = listen_address(args.http)
    token = args.token or os.environ.get(TOKEN_VARIABLE)
    generated = token is None and not is_loopback(host)
    if generated:
        token = new_token()
    target = options.peer(args)
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(BACKLOG)  # connections wait for the server from now on: the address printed below works
    port = listener.getsockname()[1]
    wildcard = host in ("0.0.0.0", "::")
    hosts = [*args.allow_host, *([socket.gethostname(), socket.getfqdn()] if wildcard else [host])]
    dashboard = Dashboard(
        target.endpoint,
        args.transport,
        **target.curve.kwargs(),
        interval=args.interval,
        timeout=args.timeout,
        allow_control=args.allow_control,
        token=token,
        hosts=hosts,
        max_services=args.shown_services,
        max_workers=args.shown_workers,
        max_streams=args.max_streams,
        max_streams_per_client=args.max_streams_per_client,
    )
    shown = f"[{host}]" if ":" in host else host
    address = f"http://{shown}:{port}/" + (f"?token={quote(token, safe='')}" if generated and token else "")
    print(f"generaldomo dashboard: {address} (broker {target.endpoint})", flush=True)
    config = uvicorn.Config(
        dashboard.asgi(), log_level="warning", timeout_graceful_shutdown=2, access_log=False, lifespan="on"
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: object) -> None:
            dashboard.feed.stop()  # the pages' streams end, so the server need not wait for them
            super().handle_exit(sig, frame)  # type: ignore[arg-type]

    try:
        Server(config).run(sockets=[listener])
    finally:
        dashboard.close()
        listener.close()
    return Exit.OK


COMMAND = Command(
    "dashboard", "serve a live web page of a broker (mmi.status, mmi.flow)", arguments, run, DESCRIPTION,
    configurable=True, hidden=("token",),
)  # fmt: skip
