"""Instructions per request of generaldomo's own parts, counted by callgrind: the ``Client``, the ``Worker`` and
the broker core alone, which part ``peers`` and ``python -m bench.instructions`` time or count only as wholes.

``python -m bench.peer_instructions [--role client|worker|core] [--transport router|server] [--requests N]``
runs this module again under ``valgrind --tool=callgrind --separate-threads=yes --instr-atstart=no``. Inside,
the part measured runs in the main thread: ``client`` sends N sync 16 B requests through a ``generaldomo broker``
process to a ``generaldomo worker`` process; ``worker`` serves N such requests of a client process; ``core``
feeds a :class:`~generaldomo.sansio.broker.core.BrokerCore` N MDP/0.1 requests and their replies (no sockets, as
part ``core`` does). After a warm-up it switches counting on for itself (``callgrind_control -i on``), zeroes
the counters, does the N requests and dumps them; the report gives the instructions per request of the calling
thread and of every thread (libzmq's I/O threads and the peer's IO or heartbeat thread too). The other
processes run natively. The calling thread's count does not move with the machine's load; the other threads'
include what they do per unit of time (an IO thread's periodic looks), which callgrind's slowness inflates.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from bench.procs import ROOT, free_port

TIMEOUT = 600.0  # seconds for the whole measurement (valgrind is slow once counting)
WARMUP = 200  # requests before counting
PAYLOAD = b"x" * 16
INSIDE = "GDBENCH_UNDER_CALLGRIND"  # set in the child that valgrind runs


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], capture_output=True, check=True, timeout=TIMEOUT)


def _start() -> None:
    _control("-i", "on")
    _control("-z")


def _peer(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "generaldomo", *args], stderr=subprocess.DEVNULL)


def _client(endpoint: str, transport: str, count: int) -> None:
    import generaldomo

    worker = _peer("worker", "--transport", transport, "--connect", endpoint, "--service", "echo")
    try:
        with generaldomo.Client(endpoint, transport=transport) as client:
            for _ in range(WARMUP):
                client.request("echo", PAYLOAD, timeout=TIMEOUT)
            _start()
            for _ in range(count):
                client.request("echo", PAYLOAD, timeout=TIMEOUT)
            _control("-d")
    finally:
        worker.terminate()
        worker.wait(30)


def _worker(endpoint: str, transport: str, count: int) -> None:
    import generaldomo

    served = [0]

    def echo(payload: bytes) -> bytes:
        served[0] += 1
        if served[0] == WARMUP:
            _start()
        elif served[0] == WARMUP + count:
            _control("-d")
        return payload

    code = (
        f"import generaldomo\nwith generaldomo.Client({endpoint!r}, transport={transport!r}) as c:\n"
        f"    for _ in range({WARMUP + count}): c.request('echo', {PAYLOAD!r}, timeout={TIMEOUT})\n"
    )
    worker = generaldomo.Worker(endpoint, "echo", echo, transport=transport)
    client = subprocess.Popen([sys.executable, "-c", code])
    threading.Thread(target=lambda: (client.wait(), worker.stop()), daemon=True).start()
    worker.serve()
    if client.returncode:
        raise RuntimeError(f"the client exited {client.returncode}")


def _core(count: int) -> None:
    serve_core(count, _start, lambda: _control("-d"))


def serve_core(count: int, start: Callable[[], object], stop: Callable[[], object]) -> None:
    """Feed a broker core :data:`WARMUP` MDP/0.1 requests and their replies, then ``start()``, ``count`` more, and
    ``stop()`` (part ``goals`` profiles the same loop)."""
    from generaldomo.sansio.broker.core import BrokerCore, Peer

    core = BrokerCore(instance=b"bnch", random=os.urandom)
    worker, client = Peer(1, b"\x00wrkr"), Peer(0, b"\x00clnt")
    core.receive(worker, [b"", b"MDPW01", b"\x01", b"echo"], 0.0)
    request = [b"", b"MDPC01", b"echo", PAYLOAD]

    def serve(n: int) -> None:
        for _ in range(n):
            [(_, frames)] = core.receive(client, request, 0.0)  # the task, to the worker
            core.receive(worker, [b"", b"MDPW01", b"\x03", frames[3], b"", PAYLOAD], 0.0)  # its reply

    serve(WARMUP)
    start()
    serve(count)
    stop()
    if core.counters["completed"] != WARMUP + count:
        raise RuntimeError(f"the core completed {core.counters['completed']} of {WARMUP + count}")


def _inside(role: str, transport: str, count: int) -> None:
    if role == "core":
        _core(count)
        return
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    broker = _peer("broker", "--transport", transport, "--bind", endpoint)
    try:
        (_client if role == "client" else _worker)(endpoint, transport, count)
    finally:
        broker.terminate()
        broker.wait(30)


# where the calling thread's instructions go, by the source file of each function (callgrind_annotate's names)
KINDS = (
    ("compiled core", ("__native_", "mypyc/", ":CPyDef_", ":CPyPy_", ":CPy")),
    ("interpreter", ("Python/ceval.c", "pycore_ceval.h", "frame.c")),
    ("CPython objects and memory", ("Python-3", "python3.")),
)


def breakdown(dump: Path) -> dict[str, float]:
    """The share of ``dump``'s instructions in each of :data:`KINDS` (``other``: libc, libzmq...), from each
    function's own instructions (``callgrind_annotate --inclusive=no``); empty when callgrind_annotate fails."""
    done = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", str(dump)],
        capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    shares: dict[str, float] = {}
    total = 0
    for line in done.stdout.splitlines():
        figure, _, rest = line.strip().partition(" ")
        if not figure.replace(",", "").isdigit() or "%)" not in rest:
            continue
        where = rest.split("%)", 1)[1].strip()
        if "PROGRAM TOTALS" in where:
            total = int(figure.replace(",", ""))
            continue
        kind = next((name for name, marks in KINDS if any(mark in where for mark in marks)), "other")
        shares[kind] = shares.get(kind, 0) + int(figure.replace(",", ""))
    return {kind: ir / total for kind, ir in shares.items()} if total else {}


def measure(role: str, transport: str, count: int) -> dict[str, float]:
    """Instructions per request: ``calling`` (the main thread) and ``all`` (every thread); and the calling
    thread's share in each of :data:`KINDS` (``share:`` + its name; see :func:`breakdown`)."""
    with tempfile.TemporaryDirectory(prefix="gdcallgrind-") as tmp:
        out = Path(tmp)
        valgrind = ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--instr-atstart=no"]
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        args = [f"--callgrind-out-file={out}/callgrind.%p", sys.executable, "-m", "bench.peer_instructions"]
        args += ["--role", role, "--transport", transport, "--requests", str(count)]
        env = {**os.environ, INSIDE: "1", "PYTHONPATH": path}
        done = subprocess.run([*valgrind, *args], cwd=ROOT, env=env, capture_output=True, timeout=TIMEOUT, check=False)
        if done.returncode:
            raise RuntimeError(f"the measured process exited {done.returncode}: {done.stderr.decode()[-2000:]}")
        counts, shares = {}, {}
        for dump in sorted(out.glob("callgrind.*.1-*")):  # the dump of each thread; -01 is the main thread
            for line in dump.read_text().splitlines():
                if line.startswith(("summary:", "totals:")):
                    counts[dump.name.rsplit("-", 1)[1]] = int(line.split()[1])
                    break
            if dump.name.endswith("-01"):
                shares = breakdown(dump)
    if "01" not in counts:
        raise RuntimeError("callgrind wrote no dump of the main thread")
    found = {"calling": counts["01"] / count, "all": sum(counts.values()) / count}
    return found | {f"share:{kind}": share for kind, share in shares.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peer_instructions", description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=("client", "worker", "core"), default="client")
    parser.add_argument("--transport", choices=("router", "server"), default="router")
    parser.add_argument("--requests", type=int, default=1000, help="sync requests counted (default 1000)")
    args = parser.parse_args(argv)
    if os.environ.get(INSIDE):
        _inside(args.role, args.transport, args.requests)
        return 0
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("bench.peer_instructions needs valgrind (Debian package valgrind)", file=sys.stderr)
        return 2
    found = measure(args.role, args.transport, args.requests)
    what = "core (MDP/0.1 request + reply)" if args.role == "core" else f"{args.role} ({args.transport})"
    print("| part | instructions/request, calling thread | all threads |")
    print("|---|---:|---:|")
    print(f"| {what} | {found['calling']:,.0f} | {found['all']:,.0f} |")
    shares = sorted(
        ((k.removeprefix("share:"), v) for k, v in found.items() if k.startswith("share:")), key=lambda kv: -kv[1]
    )
    if shares:
        print("\nthe calling thread's instructions: " + ", ".join(f"{kind} {share:.0%}" for kind, share in shares))
    return 0


if __name__ == "__main__":
    sys.exit(main())
