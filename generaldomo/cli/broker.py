"""``generaldomo broker``: run a broker until SIGINT or SIGTERM.

This module owns the broker command's flags and turns them into :class:`generaldomo.io.broker.Broker` calls;
it adds no behaviour of its own. Defaults come from :class:`generaldomo.sansio.settings.Settings`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import zmq

from generaldomo.cli import options
from generaldomo.cli.command import Command, Exit
from generaldomo.io.address_file import Published
from generaldomo.io.beacon import BROADCAST, DEFAULT_PORT, announceable
from generaldomo.io.broker import Broker
from generaldomo.io.transport import require_draft
from generaldomo.sansio.adaptive import AdaptiveLimits
from generaldomo.sansio.resolver import load_resolver
from generaldomo.sansio.settings import PeerSettings, Settings

Number = TypeVar("Number", int, float)
DEFAULTS = Settings()
BEACON_NAME = "generaldomo"
BEACON_INTERVAL = 1.0


def limit(kind: Callable[[str], Number]) -> Callable[[str], Number | None]:
    """A parser of a flow limit: a number read by ``kind``, or 'none' for no limit."""

    def parse(text: str) -> Number | None:
        return None if text.lower() == "none" else kind(text)

    return parse


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
        default=[],
        metavar="SERVICE:KEY=VALUE,...",
        help="flow limits of a service, e.g. echo:rate=5,burst=1,concurrency=10,bytes_in_flight=1000000,"
        "adaptive=1..64 (repeatable; default: no limits)",
    )
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="keep what is changed at run time (flow limits) in DIR and restore it at start, and let workers hand "
        "over the results of tasks a previous broker on DIR gave them (default: none, nothing survives a restart)",
    )
    _limits(parser)
    options.curve_server(parser)
    _announcing(parser)


# The core's limits: (flag, Settings field, parser, metavar, help); "none" lifts those that may be None.
LIMITS: tuple[tuple[str, str, Callable[[str], Any], str, str], ...] = (
    ("--max-attempts", "max_attempts", int, "N", "workers a task may be lost with before the client gets 503"),
    ("--queue-timeout", "queue_timeout", float, "SECONDS", "answer 504 to requests queued longer (default: never)"),
    ("--max-message", "max_message", int, "BYTES", "requests and results larger than this get 413"),
    ("--max-frames", "max_frames", int, "N", "messages with more frames are dropped while they are read"),
    ("--queue-bytes", "queue_bytes", limit(int), "BYTES", "bytes of requests held, 429 beyond; 'none': no limit"),
    ("--service-queue-bytes", "service_queue_bytes", limit(int), "BYTES", "the same per service; 'none': no limit"),
    ("--keep-answers", "keep_answers", float, "SECONDS", "how long final answers are kept for clients' re-asks"),
    ("--keep-bytes", "keep_bytes", int, "BYTES", "bytes of kept answers, oldest evicted first"),
    ("--service-idle", "service_idle", limit(float), "SECONDS", "forget services idle this long; 'none': never"),
    (
        "--served-memory",
        "served_memory",
        float,
        "SECONDS",
        "how long a service that had workers counts as known to requests that fail fast for unknown services (404)",
    ),
    ("--max-workers", "max_workers", limit(int), "N", "registered workers at most, more are refused; 'none': no limit"),
    (
        "--recovery",
        "recovery",
        float,
        "SECONDS",
        "restarted on a --state-dir, hold dispatch this long for workers resuming tasks (default: twice the "
        "heartbeat; 0: off)",
    ),
    ("--held-bytes", "held_bytes", limit(int), "BYTES", "bytes held for all peers (the ledger); 'none': no limit"),
    ("--connection-bytes", "connection_bytes", limit(int), "BYTES", "bytes held for one connection; 'none': no limit"),
    (
        "--connection-requests",
        "connection_requests",
        limit(int),
        "N",
        "queued and running requests per connection; 'none': no limit",
    ),
    (
        "--connection-services",
        "connection_services",
        limit(int),
        "N",
        "services one connection may make; 'none': no limit",
    ),
    (
        "--connection-worker-share",
        "connection_worker_share",
        float,
        "SHARE",
        "share of --max-workers one connection may register (at most 0.5)",
    ),
)


def _limits(parser: argparse.ArgumentParser) -> None:
    for flag, field, kind, metavar, text in LIMITS:
        parser.add_argument(flag, dest=field, type=kind, default=getattr(DEFAULTS, field), metavar=metavar, help=text)
    parser.add_argument(
        "--client-expiry",
        type=limit(float),
        default=DEFAULTS.client_expiry,
        metavar="SECONDS",
        help="drop the queued requests of a client silent this long (default: twice the liveness expiry, at "
        "least 10 s)",
    )


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


def _announcing(parser: argparse.ArgumentParser) -> None:
    """Ways peers learn where the broker is: beacon, address file; and the metrics endpoint."""
    parser.add_argument("--beacon", action="store_true", help="announce the endpoints by UDP beacon")
    parser.add_argument("--beacon-to", default=BROADCAST, metavar="ADDRESS", help="beacon destination")
    parser.add_argument("--beacon-port", type=int, default=DEFAULT_PORT, metavar="PORT", help="beacon UDP port")
    parser.add_argument(
        "--beacon-interval", type=float, default=BEACON_INTERVAL, metavar="SECONDS", help="seconds between beacons"
    )
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
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics over HTTP (0: any free port; default: no metrics)",
    )
    parser.add_argument("--metrics-bind", default="127.0.0.1", metavar="ADDRESS", help="metrics HTTP address")


def run(args: argparse.Namespace) -> int:
    if args.metrics_port is not None and importlib.util.find_spec("prometheus_client") is None:
        raise ValueError("--metrics-port needs prometheus_client: pip install 'generaldomo[metrics]'")
    stop = options.stop_on_signals()  # from here on a signal cannot skip the clean-up below
    broker = make_broker(args)
    for transport, endpoint in broker.endpoints:
        print(f"generaldomo broker: {transport} {endpoint}", flush=True)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(broker.stop)
        announce(broker, args, cleanup, _say)
        broker.start()
        options.wait_for_signal(stop)
    return Exit.OK


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
        endpoints = announceable(broker.endpoints, BROADCAST)
        key = None if broker.security is None else broker.security.public_key.decode()
        instance = broker.core.instance.hex()
        cleanup.enter_context(Published(args.address_file, args.beacon_name, instance, endpoints, key))
        say(f"address file {args.address_file}")


def make_broker(args: argparse.Namespace, context: zmq.Context[Any] | None = None) -> Broker:
    """A broker with the links, resolver, settings and flow limits the flags ask for (not started), on
    ``context`` if given."""
    settings = Settings(
        heartbeat_interval=args.heartbeat,
        liveness=args.liveness,
        client_expiry=args.client_expiry,
        **{field: getattr(args, field) for _, field, *_ in LIMITS},
    )
    resolver_options = dict(option.split("=", 1) for option in args.resolver_opt)
    resolver = load_resolver(args.resolver, resolver_options) if args.resolver else None
    links = {transport: list(getattr(args, transport)) for transport in options.TRANSPORTS}
    links[args.transport] += args.bind
    if not any(links.values()):
        links[args.transport] = [options.DEFAULT_ENDPOINT]
    if links["server"]:
        require_draft()
    broker = Broker(
        resolver=resolver, settings=settings, context=context, security=options.security(args), state_dir=args.state_dir
    )
    try:
        for spec in args.flow:
            flow = parse_flow(spec)
            broker.core.set_flow(
                flow.service, flow.rate, flow.burst, flow.concurrency, 0.0,
                bytes_in_flight=flow.bytes_in_flight, adaptive=flow.adaptive,
            )  # fmt: skip
        for transport, endpoints in links.items():
            if endpoints:
                broker.add_link(transport, endpoints)
    except BaseException:
        broker.stop()  # closes the links bound so far: the context may be the application's
        raise
    return broker


@attrs.frozen
class FlowSpec:
    """The limits one ``--flow`` gives a service; None: no limit (burst: the default)."""

    service: str
    rate: float | None = None
    burst: int | None = None
    concurrency: int | None = None
    bytes_in_flight: int | None = None
    adaptive: AdaptiveLimits | None = None


def bounds(text: str) -> AdaptiveLimits | None:
    """An adaptive cap's bounds ``MIN..MAX`` (e.g. ``1..64``), or 'none' to turn it off."""
    if text.lower() == "none":
        return None
    low, sep, high = text.partition("..")
    if not sep:
        raise ValueError(f"adaptive bounds are MIN..MAX (e.g. 1..64) or none, not {text!r}")
    return AdaptiveLimits(int(low), int(high))


def parse_flow(spec: str) -> FlowSpec:
    """``SERVICE:rate=5,burst=1,concurrency=10,bytes_in_flight=1000000,adaptive=1..64`` -> its FlowSpec."""
    service, sep, pairs = spec.rpartition(":")
    if not sep or not service:
        raise ValueError(f"--flow wants SERVICE:KEY=VALUE,..., not {spec!r}")
    kinds: dict[str, Callable[[str], object]] = {
        "rate": limit(float),
        "burst": int,
        "concurrency": limit(int),
        "bytes_in_flight": limit(int),
        "adaptive": bounds,
    }
    limits: dict[str, Any] = {}
    for pair in pairs.split(","):
        key, _, value = pair.partition("=")
        if key not in kinds:
            raise ValueError(f"unknown flow limit {key!r} in {spec!r}; use {', '.join(kinds)}")
        limits[key] = kinds[key](value)
    return FlowSpec(service, **limits)


COMMAND = Command("broker", "run a broker", arguments, run)
