"""``generaldomo broker``: run a broker until SIGINT or SIGTERM.

This module owns the broker command's flags and turns them into :class:`generaldomo.io.broker.Broker` calls;
it adds no behaviour of its own. Defaults come from :class:`generaldomo.sansio.config.settings.Settings`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import zmq

from generaldomo.cli import options
from generaldomo.cli.command import Command, Exit
from generaldomo.io.beacon import BROADCAST, DEFAULT_PORT, announceable
from generaldomo.io.transport import require_draft
from generaldomo.sansio.broker.flow import declaration
from generaldomo.sansio.broker.flow.flow import LIMITS as FLOW_LIMITS
from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.config import knobs
from generaldomo.sansio.config.settings import PeerSettings, Settings

__all__ = [
    "BEACON_INTERVAL",
    "BEACON_NAME",
    "COMMAND",
    "DEFAULTS",
    "FLOW_EXAMPLE",
    "FLOW_KEYS",
    "LIMITS",
    "FlowSpec",
    "FlowSpecs",
    "announce",
    "arguments",
    "make_broker",
    "pair_config",
    "parse_flow",
    "run",
]

if TYPE_CHECKING:  # imported where used: the other commands do not load the broker
    from generaldomo.io.broker import Broker
    from generaldomo.io.failfast import OnFailure
    from generaldomo.io.hub.pair import PairConfig

DEFAULTS = Settings()
_HEARTBEATS = {knob.name for knob in knobs.PEER}  # flags of their own (options.heartbeats)
LIMITS = tuple(knob for knob in knobs.SETTINGS if knob.name not in _HEARTBEATS)  # the core's other settings
FLOW_KEYS = tuple(limit.name for limit in FLOW_LIMITS if limit.knob.kind is not knobs.Kind.TENANTS)
FLOW_EXAMPLE = declaration.example(FLOW_LIMITS, "echo")
BEACON_NAME = "generaldomo"
BEACON_INTERVAL = 1.0


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    _binds(parser)
    parser.add_argument(
        "--resolver", metavar="MODULE:ATTR", help="service resolver factory (default: plain service names)"
    )
    parser.add_argument(
        "--resolver-opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option passed to the resolver factory (repeatable; default: none)",
    )
    options.heartbeats(parser, "a worker", PeerSettings(DEFAULTS.heartbeat_interval, DEFAULTS.liveness))
    parser.add_argument(
        "--flow",
        action="append",
        type=FlowSpecs(),
        default=[],
        metavar="SERVICE:KEY=VALUE,...",
        help=f"flow limits of a service, e.g. {FLOW_EXAMPLE}; keys: {', '.join(FLOW_KEYS)}, and a tenant's "
        "weight, rate, burst or concurrency as tenants.NAME.KEY (repeatable; default: no limits)",
    )
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="keep the queued requests, the kept answers and what is changed at run time (flow limits) in DIR and "
        "restore them at start, and let workers hand over the results of tasks a previous broker on DIR gave them "
        "(default: none, nothing survives a restart)",
    )
    parser.add_argument(
        "--fsync",
        choices=("batch", "os"),
        default="batch",
        help="when --state-dir's write-ahead log is flushed: 'batch' (to disk after each group of writes, before "
        "what they report is sent; survives a power cut) or 'os' (the system's buffers: survives a crash or kill "
        "of the broker, not a power cut) (default: batch)",
    )
    parser.add_argument(
        "--trace-spans",
        action="store_true",
        help="record the broker's spans (queued, served) of requests that carry a trace context, in their traces, "
        "through OpenTelemetry (needs 'generaldomo[otel]' and an SDK set up, e.g. by opentelemetry-instrument) "
        "(default: off)",
    )
    _limits(parser)
    options.curve_server(parser)
    _pairing(parser)
    _announcing(parser)


def _limits(parser: argparse.ArgumentParser) -> None:
    """The flags of the core's settings (:data:`generaldomo.sansio.config.knobs.SETTINGS`) but the heartbeats."""
    for knob in LIMITS:
        options.add_knob(parser, knob)


def _binds(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="ENDPOINT",
        help=f"endpoint for --transport (repeatable; default: {options.DEFAULT_ENDPOINT} when no endpoint is given)",
    )
    for transport in options.TRANSPORTS:
        parser.add_argument(
            f"--{transport}",
            action="append",
            default=[],
            metavar="ENDPOINT",
            help=f"bind a {transport} link to ENDPOINT too (repeatable; default: none); serves both transports",
        )


def _pairing(parser: argparse.ArgumentParser) -> None:
    """The flags of a broker pair (one active, one passive: see the guide's high availability page)."""
    parser.add_argument(
        "--ha-peer",
        metavar="ENDPOINT",
        help="run as one of a broker pair: the other broker's --ha-bind endpoint (default: a broker alone)",
    )
    parser.add_argument(
        "--ha-role",
        choices=["primary", "backup"],
        help="with --ha-peer: this broker's role in the pair (no default: required with --ha-peer)",
    )
    parser.add_argument(
        "--ha-bind",
        metavar="ENDPOINT",
        help="with --ha-peer: the endpoint of this broker's side of the pair's link (no default: required with "
        "--ha-peer)",
    )
    options.add_knob(parser, knobs.COMMANDS["ha_heartbeat"], default=1.0)
    parser.add_argument(
        "--ha-peer-key",
        metavar="PATH",
        help="with --ha-peer and --curve-secret: the other broker's public certificate, the only key admitted on "
        "the pair's link (no default: required with --curve-secret)",
    )
    parser.add_argument(
        "--ha-plaintext",
        action="store_true",
        help="with --ha-peer and no --curve-secret: allow the pair's link without CURVE (not authenticated)",
    )


def pair_config(args: argparse.Namespace) -> PairConfig | None:
    """The broker pair the flags of :func:`_pairing` ask for (None: a broker alone); ValueError naming what is
    missing."""
    from generaldomo.io.hub.pair import PairConfig
    from generaldomo.io.keys import load_public
    from generaldomo.sansio.broker.pair import PairRole

    if args.ha_peer is None:
        given = [flag for flag in ("ha_role", "ha_bind", "ha_peer_key") if getattr(args, flag) is not None]
        if given or args.ha_plaintext:
            flags = ", ".join("--" + name.replace("_", "-") for name in given or ["ha_plaintext"])
            raise ValueError(f"{flags} need --ha-peer (the other broker of the pair)")
        return None
    if args.ha_role is None or args.ha_bind is None:
        raise ValueError("--ha-peer needs --ha-role primary|backup and --ha-bind ENDPOINT")
    key = None if args.ha_peer_key is None else load_public(args.ha_peer_key)
    return PairConfig(
        PairRole(args.ha_role), args.ha_bind, args.ha_peer, args.ha_heartbeat, key, plaintext=args.ha_plaintext
    )


def _announcing(parser: argparse.ArgumentParser) -> None:
    """Ways peers learn where the broker is: beacon, address file; and the metrics endpoint."""
    parser.add_argument("--beacon", action="store_true", help="announce the endpoints by UDP beacon")
    parser.add_argument("--beacon-to", default=BROADCAST, metavar="ADDRESS", help="beacon destination")
    options.add_knob(parser, knobs.COMMANDS["beacon_port"], default=DEFAULT_PORT)
    options.add_knob(parser, knobs.COMMANDS["beacon_interval"], default=BEACON_INTERVAL)
    parser.add_argument(
        "--beacon-name",
        "--name",
        dest="beacon_name",
        default=BEACON_NAME,
        metavar="NAME",
        help="broker name in its beacon and address file (--name is the older spelling)",
    )
    parser.add_argument(
        "--address-file",
        metavar="PATH",
        help="write the concrete endpoints to PATH as JSON (atomically) for peers' --broker-file; removed on "
        "exit (default: no file)",
    )
    options.add_knob(parser, knobs.COMMANDS["metrics_port"])
    parser.add_argument("--metrics-bind", default="127.0.0.1", metavar="ADDRESS", help="metrics HTTP address")


def run(args: argparse.Namespace) -> int:
    if args.metrics_port is not None and importlib.util.find_spec("prometheus_client") is None:
        raise ValueError("--metrics-port needs prometheus_client: pip install 'generaldomo[metrics]'")
    stop = options.stop_on_signals()  # from here on a signal cannot skip the clean-up below
    broker = make_broker(args, on_failure=lambda error: stop.set())
    for transport, endpoint in broker.endpoints:
        print(f"generaldomo broker: {transport} {endpoint}", flush=True)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(_stopped, broker)
        announce(broker, args, cleanup, _say)
        broker.start()
        options.wait_for_signal(stop, lambda: broker.serving)
    return Exit.SERVE_FAILED if broker.failure is not None else Exit.OK


def _stopped(broker: Broker) -> None:
    """Stop the broker; say so if it had stopped serving because of an error (the exit status says it too)."""
    from generaldomo.errors import BrokerFailed

    try:
        broker.stop()
    except BrokerFailed as failed:
        print(f"generaldomo broker: {failed}", file=sys.stderr, flush=True)


def _say(line: str) -> None:
    print(f"generaldomo broker: {line}", flush=True)


def announce(
    broker: Broker, args: argparse.Namespace, cleanup: contextlib.ExitStack, say: Callable[[str], None]
) -> None:
    """Serve the metrics, start the beacon and publish the address file the flags ask for, each undone by
    ``cleanup``; ``say`` tells where (a line each)."""
    if args.metrics_port is not None:
        port = broker.serve_metrics(args.metrics_port, args.metrics_bind)
        say(f"metrics http://{args.metrics_bind}:{port}/metrics")
    if args.beacon:
        broker.announce(args.beacon_name, args.beacon_to, args.beacon_port, args.beacon_interval)
    if args.address_file:
        from generaldomo.io.address_file import Published

        endpoints = announceable(broker.endpoints, BROADCAST)
        key = None if broker.security is None else broker.security.public_key.decode()
        instance = broker.core.instance.hex()
        cleanup.enter_context(Published(args.address_file, args.beacon_name, instance, endpoints, key))
        say(f"address file {args.address_file}")


def make_broker(
    args: argparse.Namespace, context: zmq.Context[Any] | None = None, on_failure: OnFailure | None = None
) -> Broker:
    """A broker with the links, resolver, settings and flow limits the flags ask for (not started), on
    ``context`` if given, telling ``on_failure`` if its loop stops on an error."""
    from generaldomo.io.broker import Broker
    from generaldomo.sansio.broker import mmi
    from generaldomo.sansio.broker.services.resolver import load_resolver

    settings = Settings(**{knob.name: getattr(args, knob.name) for knob in knobs.SETTINGS})
    resolver_options = dict(option.split("=", 1) for option in args.resolver_opt)
    resolver = load_resolver(args.resolver, resolver_options) if args.resolver else None
    links = {transport: list(getattr(args, transport)) for transport in options.TRANSPORTS}
    links[args.transport] += args.bind
    if not any(links.values()):
        links[args.transport] = [options.DEFAULT_ENDPOINT]
    if links["server"]:
        require_draft()
    broker = Broker(
        resolver=resolver, settings=settings, context=context, security=options.security(args),
        state_dir=args.state_dir, on_failure=on_failure, pair=pair_config(args), fsync=args.fsync,
        trace_spans=args.trace_spans,
    )  # fmt: skip
    try:
        for spec in args.flow:
            flow = parse_flow(spec)
            broker.core.apply_flow(mmi.FlowChange(flow.service, flow.limits), 0.0)
        for transport, endpoints in links.items():
            if endpoints:
                broker.add_link(transport, endpoints)
    except BaseException:
        broker.stop()  # closes the links bound so far: the context may be the application's
        raise
    return broker


@attrs.frozen
class FlowSpec:
    """The limits one ``--flow`` gives a service (its attributes are also those of :attr:`limits`)."""

    service: str
    limits: FlowLimits = attrs.field(factory=FlowLimits)

    def __getattr__(self, name: str) -> Any:  # spec.rate, spec.adaptive, ...: the limits'
        return getattr(self.limits, name)


def parse_flow(spec: str) -> FlowSpec:
    """``SERVICE:KEY=VALUE,...`` (keys: the names of :data:`generaldomo.sansio.broker.flow.flow.LIMITS`, e.g.
    ``rate=5,burst=1,concurrency=10``; a tenant's limits as ``tenants.NAME.KEY=VALUE``) -> its FlowSpec;
    ValueError naming what is wrong."""
    service, sep, pairs = spec.rpartition(":")
    if not sep or not service:
        raise ValueError(f"--flow wants SERVICE:KEY=VALUE,..., not {spec!r}")
    try:
        return FlowSpec(service, FlowLimits().merged(declaration.changes(FLOW_LIMITS, pairs)))
    except ValueError as error:
        raise ValueError(f"--flow {spec!r}: {error}") from None


class FlowSpecs:
    """The type of ``--flow``: a spec, checked by :func:`parse_flow` (kept as text); :meth:`from_table` reads a
    configuration file's ``[broker.flow]`` table instead (service -> its limits, as ``mmi.flow`` takes them)."""

    __name__ = "flow"  # argparse names the type in some messages

    def __call__(self, text: str) -> str:
        try:
            parse_flow(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error).removeprefix("--flow ")) from None
        return text

    def from_table(self, table: dict[str, Any]) -> list[str]:
        """The specs of ``{service: {limit: value, ...}, ...}`` (ranges as ``{min, max}`` or ``"MIN..MAX"``, tenants
        as ``{name: {weight: ...}}``); ValueError naming what is wrong."""
        if not all(isinstance(limits, dict) for limits in table.values()):
            raise ValueError(
                "flow is a list of SERVICE:KEY=VALUE,... specs, or a table of services: {echo = {rate = 5}}"
            )
        return [self(f"{service}:{declaration.text(FLOW_LIMITS, limits)}") for service, limits in table.items()]


COMMAND = Command("broker", "run a broker", arguments, run, configurable=True)
