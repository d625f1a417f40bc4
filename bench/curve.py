"""What CURVE costs: the same echo workloads over plaintext and CURVE links, measured in one run.

``python -m bench.curve [--rounds N]`` makes key pairs (``generaldomo.io.keys.keygen``) in a temporary
directory, then per transport (ROUTER, SERVER over loopback tcp) and security (plaintext, CURVE) starts a broker
process and one echo worker process, and measures from this process with ``generaldomo.Client`` (over a context
whose sockets carry the client's CURVE key): sync round trips (req/s, p50) and pipelined throughput (100
outstanding), with 16 B and 64 KiB payloads. Rounds interleave the four set-ups; the table gives medians.
It is also part ``curve`` of ``python -m bench`` (not of ``--smoke``).
``--raw`` measures only the cryptography's share: a raw pyzmq DEALER/ROUTER echo, plain and CURVE.
Every loop is bounded in count and time; the children die on exit.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zmq

from bench.config import Config, say
from bench.load import GdDriver, median, pipelined_run, sync_run
from bench.procs import free_port
from generaldomo import Client
from generaldomo.io import keys

PAYLOADS = {"16 B": b"x" * 16, "64 KiB": b"x" * 65536}
# A broker (or echo worker) process: argv = transport, endpoint, key directory or "" for plaintext.
BROKER = """\
import sys
from generaldomo import Broker
from generaldomo.io.auth import BrokerSecurity
transport, endpoint, root = sys.argv[1:]
security = BrokerSecurity.from_files(f"{root}/broker.key_secret", clients=f"{root}/clients",
                                     workers=f"{root}/workers") if root else None
Broker(transport, [endpoint], security=security).run()
"""
WORKER = """\
import sys, zmq
from generaldomo import Worker
from generaldomo.io import keys
transport, endpoint, root = sys.argv[1:]
context = zmq.Context()
if root:
    public, secret = keys.load_secret(f"{root}/worker.key_secret")
    context.setsockopt(zmq.CURVE_PUBLICKEY, public)
    context.setsockopt(zmq.CURVE_SECRETKEY, secret)
    context.setsockopt(zmq.CURVE_SERVERKEY, keys.load_public(f"{root}/broker.key"))
Worker(endpoint, "echo", lambda payload: payload, transport, context=context).serve()
"""


def make_keys(root: Path) -> None:
    keys.keygen(root, "broker")
    for name, role in (("client", "clients"), ("worker", "workers")):
        public, _ = keys.keygen(root, name)
        (root / role).mkdir()
        shutil.copy(public, root / role)


def client_context(root: str) -> zmq.Context[Any]:
    context: zmq.Context[Any] = zmq.Context()
    if root:
        public, secret = keys.load_secret(f"{root}/client.key_secret")
        context.setsockopt(zmq.CURVE_PUBLICKEY, public)
        context.setsockopt(zmq.CURVE_SECRETKEY, secret)
        context.setsockopt(zmq.CURVE_SERVERKEY, keys.load_public(f"{root}/broker.key"))
    return context


class Setup:
    """A broker and a worker process of one transport and security, and a driver for them."""

    def __init__(self, transport: str, root: str) -> None:
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        argv = [transport, self.endpoint, root]
        self.procs = [
            subprocess.Popen([sys.executable, "-c", code, *argv], stderr=subprocess.DEVNULL)
            for code in (BROKER, WORKER)
        ]
        self.context = client_context(root)
        self.driver = GdDriver(  # the broker and worker processes are starting: wait for them
            lambda: Client(self.endpoint, transport, context=self.context, fail_unknown=False, fail_unreachable=False),
            "echo",
        )
        deadline = time.monotonic() + 60
        while True:  # until the worker has registered
            try:
                pipelined_run(self.driver, b"warm", 20, 5.0, 4)
                break
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise
        self.driver.idle()

    def close(self) -> None:
        self.driver.close()
        for proc in self.procs:
            proc.kill()
            proc.wait(10)
        self.context.term()


def raw_echo(curve: bool, size: int, n: int = 200) -> float:
    """µs per round trip of a DEALER to a ROUTER echo in this process, with or without CURVE."""
    context: zmq.Context[Any] = zmq.Context()
    server_public, server_secret = zmq.curve_keypair()
    public, secret = zmq.curve_keypair()
    router, dealer = context.socket(zmq.ROUTER), context.socket(zmq.DEALER)
    if curve:
        router.curve_server, router.curve_secretkey = True, server_secret
        dealer.curve_publickey, dealer.curve_secretkey, dealer.curve_serverkey = public, secret, server_public
    dealer.connect(f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}")
    payload = b"x" * size
    start = 0.0
    for i in range(n + 1):  # the first round trip is the handshake
        start = time.perf_counter() if i == 1 else start
        dealer.send(payload)
        router.send_multipart(router.recv_multipart(copy=False), copy=False)
        dealer.recv(copy=False)
    elapsed = time.perf_counter() - start
    router.close(0)
    dealer.close(0)
    context.term()
    return elapsed / n * 1e6


def measure(rounds: int, seconds: float, sync_n: int = 5000, pipe_n: int = 20000) -> dict[str, Any]:
    """Medians per transport and payload, plaintext against CURVE, the four set-ups interleaved ``rounds`` times."""
    results: dict[tuple[str, str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="gdcurve-") as tmp:
        make_keys(Path(tmp))
        setups = {
            (t, s): Setup(t, tmp if s == "CURVE" else "") for t in ("router", "server") for s in ("plain", "CURVE")
        }
        try:
            for round_ in range(rounds):
                order = list(setups.items())
                order = order[round_ % len(order) :] + order[: round_ % len(order)]
                for (transport, security), setup in order:
                    for size, payload in PAYLOADS.items():
                        sync = sync_run(setup.driver, payload, sync_n, seconds)
                        piped = pipelined_run(setup.driver, payload, pipe_n, seconds, 100)
                        setup.driver.idle()
                        for name, value in (("sync", sync["rps"]), ("p50", sync["p50_us"]), ("piped", piped["rps"])):
                            results.setdefault((transport, size, security, name), []).append(value)
                say(f"curve: round {round_ + 1} of {rounds} done")
        finally:
            for setup in setups.values():
                setup.close()
    rows = [
        {"transport": t, "payload": size, **{f"{s}_{n}": median(results[(t, size, s, n)]) for s in ("plain", "CURVE")
                                              for n in ("sync", "p50", "piped")}}
        for t in ("router", "server")
        for size in PAYLOADS
    ]  # fmt: skip
    return {"rows": rows, "rounds": rounds, "errors": []}


def run(cfg: Config) -> dict[str, Any]:
    """The ``curve`` part of ``python -m bench``, sized by ``cfg``."""
    return measure(cfg.rounds, cfg.seconds, cfg.sync_n, cfg.pipe_n)


def markdown(part: dict[str, Any]) -> str:
    """The part's table: plain / CURVE per transport and payload, with the CURVE/plain ratio."""
    lines = [
        "### What CURVE costs (`python -m bench --only curve`, or `python -m bench.curve`)",
        "",
        "| transport | payload | sync req/s plain / CURVE | p50 µs plain / CURVE | pipelined req/s plain / CURVE |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in part["rows"]:
        cells = []
        for name, fmt in (("sync", "{:,.0f}"), ("p50", "{:.0f}"), ("piped", "{:,.0f}")):
            plain, curve = row[f"plain_{name}"], row[f"CURVE_{name}"]
            cells.append(f"{fmt.format(plain)} / {fmt.format(curve)} ({curve / plain:.2f}x)")
        lines.append(f"| {row['transport'].upper()} | {row['payload']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0, help="cap per measurement")
    parser.add_argument("--raw", action="store_true", help="only the raw pyzmq echo, plain and CURVE")
    args = parser.parse_args(argv)
    if args.raw:
        print(f"libzmq {zmq.zmq_version()}")
        for name, payload in PAYLOADS.items():
            plain, curve = raw_echo(False, len(payload)), raw_echo(True, len(payload))
            print(f"{name}: {plain:.0f} µs plain, {curve:.0f} µs CURVE per round trip")
        return 0
    print(markdown(measure(args.rounds, args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
