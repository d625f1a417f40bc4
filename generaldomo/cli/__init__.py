"""The ``generaldomo`` command: broker, echo worker, client, demo and doctor.

This module owns argument parsing and process life (signals, exit codes). Everything it runs is the public
Python API; it adds no behaviour of its own.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence

import zmq

from generaldomo import __version__
from generaldomo.cli.status_view import render
from generaldomo.io.beacon import BROADCAST, DEFAULT_PORT, DiscoveryError, find_broker
from generaldomo.io.bridge import Bridge
from generaldomo.io.broker import Broker
from generaldomo.io.transport import DraftUnavailable, draft_available, install_command, require_draft
from generaldomo.peers.client import Client, RequestFailed
from generaldomo.peers.worker import Handler, Worker
from generaldomo.sansio.resolver import load_resolver
from generaldomo.sansio.settings import DEFAULT_MAX_MESSAGE, Settings

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"
TRANSPORTS = ("router", "server")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose > 1 else logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        if args.transport == "server" or getattr(args, "demo_transport", None) == "server":
            require_draft()
        return int(args.run(args) or 0)
    except DraftUnavailable as error:
        print(f"generaldomo: {error}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, ImportError, AttributeError, zmq.ZMQError, DiscoveryError) as error:
        print(f"generaldomo: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C on a command that installs no handler of its own (client, status)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="generaldomo", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=_versions())
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (repeat for debug)")
    parser.set_defaults(transport=None)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    broker = commands.add_parser("broker", help="run a broker")
    _transport(broker)
    broker.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="ENDPOINT",
        help=f"endpoint for --transport (repeatable; default {DEFAULT_ENDPOINT} when no endpoint is given)",
    )
    for transport in TRANSPORTS:
        broker.add_argument(
            f"--{transport}",
            action="append",
            default=[],
            metavar="ENDPOINT",
            help=f"bind a {transport} link to ENDPOINT too (repeatable); one broker can serve both transports",
        )
    broker.add_argument(
        "--resolver", metavar="MODULE:ATTR", help="service resolver factory (default: plain service names)"
    )
    broker.add_argument(
        "--resolver-opt", action="append", default=[], metavar="KEY=VALUE", help="option passed to the resolver factory"
    )
    _heartbeats(broker, "a worker")
    broker.add_argument(
        "--flow",
        action="append",
        default=[],
        metavar="SERVICE:KEY=VALUE,...",
        help="flow limits of a service, e.g. echo:rate=5,burst=1,concurrency=10 (repeatable)",
    )
    broker.add_argument("--beacon", action="store_true", help="announce the endpoints by UDP beacon")
    broker.add_argument("--beacon-to", default=BROADCAST, metavar="ADDRESS", help=f"beacon destination ({BROADCAST})")
    broker.add_argument("--beacon-port", type=int, default=DEFAULT_PORT, metavar="PORT", help=f"({DEFAULT_PORT})")
    broker.add_argument("--beacon-interval", type=float, default=1.0, metavar="SECONDS", help="(1.0)")
    broker.add_argument("--name", default="generaldomo", help="broker name in its beacon (generaldomo)")
    broker.add_argument("--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics over HTTP (0: any)")
    broker.add_argument("--metrics-bind", default="127.0.0.1", metavar="ADDRESS", help="(127.0.0.1)")
    broker.add_argument("--max-attempts", type=int, default=3, help="workers a task may be lost with (default 3)")
    broker.add_argument(
        "--queue-timeout", type=float, metavar="SECONDS", help="answer 504 to requests queued longer (default never)"
    )
    broker.add_argument(
        "--max-message",
        type=int,
        default=DEFAULT_MAX_MESSAGE,
        metavar="BYTES",
        help=f"requests and results larger than this get 413 (default {DEFAULT_MAX_MESSAGE})",
    )
    broker.set_defaults(run=_run_broker)

    worker = commands.add_parser("worker", help="run the built-in echo worker")
    _transport(worker)
    _connect(worker)
    worker.add_argument("--service", default="echo", help="service description to announce (default echo)")
    worker.add_argument("--sleep", type=float, default=0.0, metavar="SECONDS", help="simulated work per request")
    worker.add_argument("--tag", default="", help="prefix every reply with TAG: (to tell workers apart)")
    _heartbeats(worker, "the broker")
    worker.set_defaults(run=_run_worker)

    client = commands.add_parser("client", help="send one request and print the reply")
    _transport(client)
    _connect(client)
    client.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS")
    _heartbeats(client, "the broker")
    client.add_argument("service", help="request description (a service name with the default resolver)")
    client.add_argument("payload", nargs="*", help="payload frames (UTF-8)")
    client.set_defaults(run=_run_client)

    bridge = commands.add_parser("bridge", help="let generaldomo CLIENT peers use a standard MDP/0.1 broker")
    bridge.add_argument("--server", action="append", required=True, metavar="ENDPOINT", help="bind (repeatable)")
    bridge.add_argument("--broker", required=True, metavar="ENDPOINT", help="the MDP/0.1 broker's ROUTER endpoint")
    _heartbeats(bridge, "a client")
    bridge.add_argument("--idle-timeout", type=float, default=30.0, metavar="SECONDS", help="close idle DEALERs (30)")
    bridge.set_defaults(run=_run_bridge, transport="server")

    status = commands.add_parser("status", help="show a broker's status (mmi.status)")
    _transport(status)
    _connect(status)
    status.add_argument("endpoint", nargs="?", help="broker endpoint (same as --connect)")
    status.add_argument("--json", action="store_true", help="print the raw JSON report")
    status.add_argument("--watch", type=float, metavar="SECONDS", help="refresh every SECONDS until interrupted")
    status.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS")
    status.set_defaults(run=_run_status)

    flow = commands.add_parser("flow", help="show or change a service's flow limits (mmi.flow)")
    _transport(flow)
    flow.add_argument("service")
    _connect(flow)
    _flow_limits(flow)
    flow.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS")
    flow.set_defaults(run=_run_flow)

    demo = commands.add_parser("demo", help="broker + echo worker + client in this process")
    demo.add_argument("--transport", dest="demo_transport", choices=(*TRANSPORTS, "both"), default="both")
    demo.add_argument("--requests", type=int, default=1000, help="requests per transport (default 1000)")
    demo.set_defaults(run=_run_demo)

    doctor = commands.add_parser("doctor", help="report versions and draft-socket support")
    doctor.set_defaults(run=lambda args: print(_versions()) or (0 if draft_available() else 1))
    return parser


def _transport(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transport", choices=TRANSPORTS, default="router", help="socket type (default router)")


def _connect(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connect", metavar="ENDPOINT", help="broker endpoint (default: $GENERALDOMO_BROKER, else "
                        f"a beacon with --discover, else {DEFAULT_ENDPOINT})")  # fmt: skip
    parser.add_argument("--discover", action="store_true", help="find the broker by its UDP beacon")
    parser.add_argument("--name", help="with --discover: only a broker announcing this name")


def _endpoint(args: argparse.Namespace) -> str:
    if args.connect or os.environ.get("GENERALDOMO_BROKER") or args.discover:
        return find_broker(args.transport, args.connect, name=args.name)
    return DEFAULT_ENDPOINT


def _flow_limits(parser: argparse.ArgumentParser) -> None:
    """Options left unset are absent from the namespace, so only what the user gave is changed."""
    unset = argparse.SUPPRESS
    parser.add_argument("--rate", type=_limit(float), default=unset, metavar="PER_SECOND", help="'none' lifts it")
    parser.add_argument("--burst", type=int, default=unset, help="dispatches allowed back to back (default 1)")
    parser.add_argument("--concurrency", type=_limit(int), default=unset, metavar="N", help="'none' lifts it")


def _limit(kind: type) -> Callable[[str], float | int | None]:
    def parse(text: str) -> float | int | None:
        return None if text.lower() == "none" else kind(text)

    return parse


def _parse_flow(spec: str) -> tuple[str, dict[str, float | int | None]]:
    """``SERVICE:rate=5,burst=1,concurrency=10`` -> (service, limits)."""
    service, sep, pairs = spec.rpartition(":")
    if not sep or not service:
        raise ValueError(f"--flow wants SERVICE:KEY=VALUE,..., not {spec!r}")
    kinds = {"rate": _limit(float), "burst": int, "concurrency": _limit(int)}
    limits: dict[str, float | int | None] = {}
    for pair in pairs.split(","):
        key, _, value = pair.partition("=")
        if key not in kinds:
            raise ValueError(f"unknown flow limit {key!r} in {spec!r}; use rate, burst, concurrency")
        limits[key] = kinds[key](value)
    return service, limits


def _heartbeats(parser: argparse.ArgumentParser, peer: str) -> None:
    parser.add_argument("--heartbeat", type=float, default=2.5, metavar="SECONDS", help="heartbeat interval (2.5)")
    parser.add_argument("--liveness", type=int, default=3, help=f"missed heartbeats before {peer} is presumed gone (3)")


def _versions() -> str:
    draft = "yes" if draft_available() else f"no (run: {install_command()})"
    versions = f"generaldomo {__version__}; pyzmq {zmq.pyzmq_version()}; libzmq {zmq.zmq_version()}"
    return f"{versions}; draft sockets (CLIENT/SERVER): {draft}"


def _wait_for_signal() -> None:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass


def _run_broker(args: argparse.Namespace) -> int:
    options = dict(option.split("=", 1) for option in args.resolver_opt)
    resolver = load_resolver(args.resolver, options) if args.resolver else None
    settings = Settings(
        heartbeat_interval=args.heartbeat,
        liveness=args.liveness,
        max_attempts=args.max_attempts,
        queue_timeout=args.queue_timeout,
        max_message=args.max_message,
    )
    links = {transport: list(getattr(args, transport)) for transport in TRANSPORTS}
    links[args.transport] += args.bind
    if not any(links.values()):
        links[args.transport] = [DEFAULT_ENDPOINT]
    if links["server"]:
        require_draft()
    broker = Broker(resolver=resolver, settings=settings)
    for spec in args.flow:
        service, limits = _parse_flow(spec)
        broker.core.set_flow(service, limits.get("rate"), limits.get("burst"), limits.get("concurrency"), 0.0)
    for transport, endpoints in links.items():
        if endpoints:
            broker.add_link(transport, endpoints)
    for transport, endpoint in broker.endpoints:
        print(f"generaldomo broker: {transport} {endpoint}", flush=True)
    if args.metrics_port is not None:
        port = broker.serve_metrics(args.metrics_port, args.metrics_bind)
        print(f"generaldomo broker: metrics http://{args.metrics_bind}:{port}/metrics", flush=True)
    if args.beacon:
        broker.announce(args.name, args.beacon_to, args.beacon_port, args.beacon_interval)
    broker.start()
    _wait_for_signal()
    broker.stop()
    return 0


def _echo(sleep: float, tag: str) -> Handler:
    prefix = f"{tag}:".encode() if tag else b""

    def echo(payload: bytes | tuple[bytes, ...]) -> bytes | tuple[bytes, ...]:
        if sleep:  # sleep(0) would still give up the CPU on every request
            time.sleep(sleep)
        if isinstance(payload, bytes):
            return prefix + payload
        return (prefix, *payload) if prefix else payload

    return echo


def _run_bridge(args: argparse.Namespace) -> int:
    bridge = Bridge(
        args.server,
        args.broker,
        heartbeat_interval=args.heartbeat,
        liveness=args.liveness,
        idle_timeout=args.idle_timeout,
    )
    for endpoint in bridge.endpoints:
        print(f"generaldomo bridge: server {endpoint} -> MDP/0.1 broker {args.broker}", flush=True)
    bridge.start()
    _wait_for_signal()
    bridge.stop()
    return 0


def _run_worker(args: argparse.Namespace) -> int:
    worker = Worker(
        _endpoint(args),
        args.service,
        _echo(args.sleep, args.tag),
        args.transport,
        heartbeat_interval=args.heartbeat,
        liveness=args.liveness,
    )

    def leave(*_: object) -> None:
        worker.stop()  # tells the broker at once, also mid-task, so the task is reissued
        if worker.busy:
            raise SystemExit(0)  # interrupt the handler; its result would be discarded anyway

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, leave)
    print(f"generaldomo worker: serving {args.service!r} from {worker.endpoint} ({args.transport})", flush=True)
    worker.serve()
    return 0


def _run_client(args: argparse.Namespace) -> int:
    with Client(_endpoint(args), args.transport, heartbeat_interval=args.heartbeat, liveness=args.liveness) as client:
        try:
            reply = client.request(args.service, [p.encode() for p in args.payload], timeout=args.timeout)
        except RequestFailed as error:
            print(f"generaldomo client: request failed: {error}", file=sys.stderr)
            return 1
        except TimeoutError as error:
            print(f"generaldomo client: {error}", file=sys.stderr)
            return 1
    for frame in reply.frames:
        print(frame.decode(errors="replace"))
    return 0


def _run_status(args: argparse.Namespace) -> int:
    args.connect = args.connect or args.endpoint
    with Client(_endpoint(args), args.transport) as client:
        while True:
            try:
                report = client.status(timeout=args.timeout)
            except TimeoutError as error:
                print(f"generaldomo status: {error}", file=sys.stderr)
                return 1
            print(json.dumps(report, indent=2) if args.json else render(report), flush=True)
            if args.watch is None:
                return 0
            try:
                time.sleep(args.watch)
            except KeyboardInterrupt:
                return 0
            print()


def _run_flow(args: argparse.Namespace) -> int:
    changes = {key: getattr(args, key) for key in ("rate", "burst", "concurrency") if hasattr(args, key)}
    with Client(_endpoint(args), args.transport) as client:
        try:
            print(json.dumps(client.flow(args.service, timeout=args.timeout, **changes)))
        except (TimeoutError, RequestFailed) as error:
            print(f"generaldomo flow: {error}", file=sys.stderr)
            return 1
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    transports = TRANSPORTS if args.demo_transport == "both" else (args.demo_transport,)
    if args.demo_transport == "both" and not draft_available():
        print("generaldomo demo: no draft sockets; showing the router transport only", file=sys.stderr)
        transports = ("router",)
    failures = 0
    for transport in transports:
        inproc = f"inproc://generaldomo-demo-{transport}"
        with Broker(transport, [inproc, "tcp://127.0.0.1:*"]) as broker:
            broker.start()
            tcp = broker.endpoint(transport, "tcp")
            worker = Worker(tcp, "echo", lambda payload: payload, transport)
            thread = threading.Thread(target=worker.serve, daemon=True)
            thread.start()
            with Client(inproc, transport) as client:
                first = client.request("echo", b"hello, generaldomo", timeout=10)
                print(f"[{transport}] broker on {inproc} and {tcp}; echo worker over tcp; client over inproc")
                print(f"[{transport}] echo replied {first.payload!r}")
                started = time.perf_counter()
                futures = [client.submit("echo", b"%d" % n) for n in range(args.requests)]
                ok = all(f.result(30).payload == b"%d" % n for n, f in enumerate(futures))
                failures += not ok
                elapsed = time.perf_counter() - started
                print(
                    f"[{transport}] {args.requests} pipelined requests, all answered correctly: {ok} "
                    f"({args.requests / elapsed:,.0f} req/s)"
                )
            worker.stop()
            thread.join(5)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
