"""Options several commands share, and what they mean once parsed.

This module owns the flags common to commands (transport, where the broker is, heartbeats, CURVE keys and
their environment variables), the CLI's own defaults, and the process-life helpers (waiting for
SIGINT/SIGTERM). A peer uses a broker key announced by its address file or beacon only with
``--trust-announced-key`` (trust on first use). Protocol defaults come from
:mod:`generaldomo.sansio.config.settings`. It knows nothing of what any one command does.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from generaldomo.io import keys
from generaldomo.io.address_file import BROKER_FILE_VARIABLE
from generaldomo.io.beacon import BROKER_VARIABLE, locate
from generaldomo.io.peer.connection import Curve
from generaldomo.io.peer.locator import Where
from generaldomo.io.signals import SignalEvent
from generaldomo.io.signals import stop_on_signals as stop_on_signals  # the commands' way to stop
from generaldomo.sansio.config import knobs
from generaldomo.sansio.config.knobs import Knob
from generaldomo.sansio.config.settings import PeerSettings

__all__ = [
    "ALIVE_CHECK",
    "ALLOWLISTS",
    "CURVE_KEY",
    "CURVE_SECRET",
    "CURVE_SERVER_KEY",
    "CURVE_TRUST",
    "DASHBOARD_TOKEN",
    "DEFAULT_ENDPOINT",
    "FIND_TIMEOUT",
    "PEER",
    "REQUEST_TIMEOUT",
    "SECRETS",
    "TRANSPORTS",
    "VARIABLES",
    "PeerCurve",
    "PeerFlags",
    "add_knob",
    "connect",
    "curve",
    "curve_server",
    "endpoint",
    "heartbeats",
    "knob_type",
    "peer",
    "peer_curve",
    "scrub",
    "secrets",
    "security",
    "timeout",
    "transport",
    "wait_for_broker",
    "wait_for_signal",
]

if TYPE_CHECKING:
    from generaldomo.io.auth import BrokerSecurity

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"
TRANSPORTS = ("router", "server")
REQUEST_TIMEOUT = 10.0  # seconds a command waits for its answer
FIND_TIMEOUT = 30.0  # seconds a peer waits for a broker file to appear or a beacon to be heard
ALIVE_CHECK = 0.5  # seconds between a serving command's looks at whether its loop still runs
PEER = PeerSettings()
CURVE_KEY = "GENERALDOMO_CURVE_KEY"  # a peer's secret certificate file
CURVE_SERVER_KEY = "GENERALDOMO_CURVE_SERVER_KEY"  # the broker's public key: Z85 text or a certificate file
CURVE_TRUST = "GENERALDOMO_CURVE_TRUST_ANNOUNCED"  # 1: take the key the address file or beacon announces
CURVE_SECRET = "GENERALDOMO_CURVE_SECRET"  # the broker's (or bridge's) secret certificate file
DASHBOARD_TOKEN = "GENERALDOMO_DASHBOARD_TOKEN"  # the secret the dashboard's requests carry
ALLOWLISTS = {  # the broker's directories of admitted public certificates, by role
    "clients": "GENERALDOMO_CURVE_CLIENTS",
    "workers": "GENERALDOMO_CURVE_WORKERS",
    "admins": "GENERALDOMO_CURVE_ADMINS",
}
# Settings that are secrets (``token``) or name a file holding one (a key pasted in place of its file's path is a
# secret too): no error message and no --print-config shows them (see :func:`secrets` and :func:`scrub`).
SECRETS = ("token", "curve_key", "curve_secret")
_SECRET_TEXT = ("token",)  # secrets themselves; the others are paths, shown while something exists there
# The variables of options older than the rule GENERALDOMO_ + the option's destination in capitals (by destination)
VARIABLES = {
    "connect": BROKER_VARIABLE,
    "broker_file": BROKER_FILE_VARIABLE,
    "curve_key": CURVE_KEY,
    "curve_server_key": CURVE_SERVER_KEY,
    "trust_announced_key": CURVE_TRUST,
    "curve_secret": CURVE_SECRET,
    "token": DASHBOARD_TOKEN,
    **ALLOWLISTS,
}


def secrets(args: argparse.Namespace | None, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The secret values the options of :data:`SECRETS` (flags or variables) carry, by key: the token always, a
    key file's path only when nothing exists at that path (then it may be the key itself; a FIFO or a link there is
    named, as a file is)."""
    environ = dict(os.environ) if environ is None else environ
    found: dict[str, str] = {}
    for key in SECRETS:
        for value in (getattr(args, key, None), environ.get(VARIABLES[key])):
            if isinstance(value, str) and value and (key in _SECRET_TEXT or not os.path.lexists(value)):
                found.setdefault(key, value)
    return found


def scrub(text: str, args: argparse.Namespace | None = None) -> str:
    """``text`` (an error message) with every secret of :func:`secrets` replaced by ``<secret not shown>``."""
    for value in sorted(set(secrets(args).values()), key=len, reverse=True):
        text = text.replace(value, "<secret not shown>")
    return text


def transport(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transport", choices=TRANSPORTS, default="router", help="socket type")


def timeout(parser: argparse.ArgumentParser, what: str = "the answer") -> None:
    add_knob(parser, knobs.COMMANDS["timeout"], default=REQUEST_TIMEOUT, help=f"wait for {what}")


def heartbeats(parser: argparse.ArgumentParser, peer: str, defaults: PeerSettings = PEER) -> None:
    """``--heartbeat`` and ``--liveness`` (:data:`generaldomo.sansio.config.knobs.PEER`); use the same values on the
    broker and its peers."""
    interval, liveness = knobs.PEER
    add_knob(parser, interval, default=defaults.heartbeat_interval, help="heartbeat interval")
    add_knob(parser, liveness, default=defaults.liveness, help=f"missed heartbeats before {peer} is presumed gone")


def knob_type(knob: Knob) -> Callable[[str], Any]:
    """The argparse type of ``knob``'s flag: its text read by :meth:`Knob.parse`."""

    def parse(text: str) -> Any:
        try:
            return knob.parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = knob.name  # argparse names the type in some messages
    return parse


def add_knob(
    parser: argparse.ArgumentParser | argparse._ActionsContainer,
    knob: Knob,
    *,
    default: Any = None,
    help: str = "",
    type: Callable[[str], Any] | None = None,
    **more: Any,
) -> argparse.Action:
    """Add ``knob``'s flag to ``parser``: destination the knob's name, its type
    (``type`` instead if given), metavar and help (``help`` instead if given); ``default`` (None: the knob's
    own)."""
    return parser.add_argument(
        knob.option,
        dest=knob.name,
        type=type or knob_type(knob),
        default=knob.default if default is None else default,
        metavar=knob.metavar or None,
        help=help or knob.help,
        **more,
    )


def connect(parser: argparse.ArgumentParser) -> None:
    """Where a peer finds its broker (see :func:`endpoint`)."""
    parser.add_argument(
        "--connect",
        action="append",
        default=[],
        metavar="ENDPOINT",
        help=f"broker endpoint; repeat it for a replacement broker elsewhere, tried in turn when the broker is "
        f"silent (default: ${BROKER_VARIABLE}, else the broker file, else a beacon with --discover, else "
        f"{DEFAULT_ENDPOINT})",
    )
    parser.add_argument(
        "--broker-file",
        metavar="PATH",
        help=f"read the endpoint from the address file a broker writes with --address-file, waiting for it to "
        f"appear, and again when it changes or the broker is silent (default: ${BROKER_FILE_VARIABLE} if set)",
    )
    parser.add_argument(
        "--discover",
        action="store_true",
        help="find the broker by its UDP beacon (and listen again when the broker is silent)",
    )
    parser.add_argument(
        "--name", metavar="NAME", help="with --discover: only a broker announcing this name (default: any)"
    )
    add_knob(parser, knobs.COMMANDS["find_timeout"], default=FIND_TIMEOUT)


def wait_for_broker(parser: argparse.ArgumentParser) -> None:
    """``--wait-for-broker``: a client command waits for a broker where nothing accepts connections yet."""
    parser.add_argument(
        "--wait-for-broker",
        dest="fail_unreachable",
        action="store_false",
        help="wait (up to --timeout) for a broker to start at the endpoint (default: when nothing accepts "
        "connections there, say so within about a second and exit 3)",
    )


def endpoint(args: argparse.Namespace) -> str:
    """The broker endpoint the options of :func:`connect` name: the first of --connect, $GENERALDOMO_BROKER,
    --broker-file or $GENERALDOMO_BROKER_FILE, a beacon (only with --discover); else the default endpoint.
    Commands with the CURVE flags of :func:`curve` use :func:`peer`, which also says how to connect."""
    return _locate(args)[0]


def _locate(args: argparse.Namespace) -> tuple[str, str | None]:
    """The endpoint, and the broker key its address file or beacon announced (None: none)."""
    broker_file = args.broker_file or os.environ.get(BROKER_FILE_VARIABLE)
    if args.connect or os.environ.get(BROKER_VARIABLE) or broker_file or args.discover:
        first = args.connect[0] if args.connect else None
        found = locate(args.transport, first, timeout=args.find_timeout, name=args.name, broker_file=args.broker_file)
        return found.endpoint, found.public_key
    log.debug("no endpoint given, no %s, no broker file: using %s", BROKER_VARIABLE, DEFAULT_ENDPOINT)
    return DEFAULT_ENDPOINT, None


def _where(args: argparse.Namespace, trust_key: bool) -> Where:
    """Where the peer follows its broker, from the options of :func:`connect` (see :func:`endpoint`); with
    ``trust_key`` a key its address file or beacon announces later comes with the new endpoint."""
    timeout = args.find_timeout
    if args.connect:
        return Where(tuple(args.connect), timeout=timeout)
    from_environment = os.environ.get(BROKER_VARIABLE)
    if from_environment:
        return Where((from_environment,), timeout=timeout)
    broker_file = args.broker_file or os.environ.get(BROKER_FILE_VARIABLE)
    if broker_file:
        return Where(broker_file=broker_file, timeout=timeout, trust_announced_key=trust_key)
    if args.discover:
        return Where(beacon=True, name=args.name, timeout=timeout, trust_announced_key=trust_key)
    return Where((DEFAULT_ENDPOINT,), timeout=timeout)


def curve(parser: argparse.ArgumentParser, announced: bool = True) -> None:
    """A peer's CURVE flags: its own key and the broker's public key (``announced``: --trust-announced-key too)."""
    parser.add_argument(
        "--curve-key",
        metavar="FILE",
        help=f"this peer's secret certificate (NAME.key_secret from generaldomo keygen) for CURVE (default: "
        f"${CURVE_KEY}; else plaintext, or a fresh key pair when the broker's key is given)",
    )
    parser.add_argument(
        "--curve-server-key",
        metavar="KEY|FILE",
        help=f"the broker's CURVE public key: Z85 text or its certificate file (default: ${CURVE_SERVER_KEY})",
    )
    if announced:
        parser.add_argument(
            "--trust-announced-key",
            action="store_true",
            help=f"without --curve-server-key, use the key the broker file or beacon announces (trust on first "
            f"use; also ${CURVE_TRUST}=1)",
        )


@attrs.frozen
class PeerCurve:
    """What a peer's CURVE flags say: the broker's public key and this peer's key pair (None: plaintext)."""

    server_key: bytes | None = None
    keys: tuple[bytes, bytes] | None = None

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`generaldomo.Client` and :class:`generaldomo.Worker`."""
        return {"server_key": self.server_key, "keys": self.keys}

    def curve(self) -> Curve | None:
        """The same as a connection's :class:`~generaldomo.io.peer.connection.Curve` (fresh keys if none given)."""
        return Curve.of(self.server_key, self.keys)


@attrs.frozen
class PeerFlags:
    """What a peer command's flags say of its broker: the endpoint it talks to, and how; ``where``: how a
    long-lived peer follows it (give it to ``Client``/``Worker`` instead of ``endpoint``)."""

    endpoint: str
    curve: PeerCurve
    where: Where


def peer(args: argparse.Namespace) -> PeerFlags:
    """The endpoint (as :func:`endpoint`) and the CURVE settings of the flags of :func:`connect` and :func:`curve`."""
    found, announced = _locate(args)
    given = getattr(args, "curve_server_key", None) or os.environ.get(CURVE_SERVER_KEY)
    where = _where(args, trust_key=_trusts(args) and not given)
    return PeerFlags(found, peer_curve(args, announced), where)


def _trusts(args: argparse.Namespace) -> bool:
    return getattr(args, "trust_announced_key", False) or os.environ.get(CURVE_TRUST, "") in ("1", "yes", "true")


def peer_curve(args: argparse.Namespace, announced: str | None = None) -> PeerCurve:
    """CURVE from --curve-key/--curve-server-key (or their variables), else a trusted announced key."""
    key_file = getattr(args, "curve_key", None) or os.environ.get(CURVE_KEY)
    given = getattr(args, "curve_server_key", None) or os.environ.get(CURVE_SERVER_KEY)
    trust = _trusts(args)
    server_key = keys.server_key(given) if given else None
    if server_key is None and announced is not None:
        if trust:
            log.info("using the broker key %s that its address file or beacon announces (trusted)", announced)
            server_key = announced.encode("ascii")
        else:
            log.warning("the broker announces a CURVE key; give --curve-server-key, or --trust-announced-key to use it")
    pair = keys.load_secret(key_file) if key_file else None
    if pair is not None and server_key is None:
        raise ValueError("--curve-key needs the broker's public key: --curve-server-key (or --trust-announced-key)")
    return PeerCurve(server_key, pair)


def curve_server(parser: argparse.ArgumentParser, roles: tuple[str, ...] = tuple(ALLOWLISTS)) -> None:
    """A CURVE server's flags: its secret certificate and the directories of admitted public keys by role."""
    parser.add_argument(
        "--curve-secret",
        metavar="FILE",
        help=f"the secret certificate (NAME.key_secret) that turns CURVE on for every link; needs at least one "
        f"of --{', --'.join(roles)} (default: ${CURVE_SECRET}; else plaintext)",
    )
    for role in roles:
        parser.add_argument(
            f"--{role}",
            metavar="DIR",
            help=f"with --curve-secret: admit the public certificates (*.key) in DIR as {role} "
            f"(default: ${ALLOWLISTS[role]}; else none)",
        )


def security(args: argparse.Namespace, roles: tuple[str, ...] = tuple(ALLOWLISTS)) -> BrokerSecurity | None:
    """The :class:`BrokerSecurity` the flags of :func:`curve_server` (or their variables) ask for; None: plaintext."""
    from generaldomo.io.auth import BrokerSecurity  # here: the clients' commands do not load the ZAP handler

    secret = args.curve_secret or os.environ.get(CURVE_SECRET)
    lists = {role: getattr(args, role, None) or os.environ.get(ALLOWLISTS[role]) for role in roles}
    if secret is None:
        if any(lists.values()):
            raise ValueError("--clients, --workers and --admins need --curve-secret (the broker's secret key)")
        return None
    if not any(lists.values()):
        raise ValueError("--curve-secret admits nobody without --clients, --workers or --admins")
    return BrokerSecurity.from_files(secret, **lists)


def wait_for_signal(stop: SignalEvent | None = None, alive: Callable[[], bool] = lambda: True) -> None:
    """Return on SIGINT or SIGTERM (or when ``stop``, made by :func:`stop_on_signals`, is set), or within
    :data:`ALIVE_CHECK` seconds of ``alive()`` turning false (a loop that ended without saying so)."""
    stop = stop or stop_on_signals()
    while not stop.wait(ALIVE_CHECK) and alive():
        pass
