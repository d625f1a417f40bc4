"""Where broker time goes per message, during a pipelined run over loopback tcp (16-byte payloads).

For each transport:

1. a plain run: a broker serving in its process's main thread (``bench.peer gd-broker``), one ``generaldomo
   worker`` process and this process's Client run ``profile_n`` pipelined requests; the broker process's CPU
   time is split between its Python thread (the event loop) and libzmq's I/O threads;
2. the steps of the loop measured alone, unprofiled, one message at a time (:func:`link_costs`): the poll that
   waits for a message, the link's ``recv_batch``, the look that finds nothing and ends a batch (the
   pure-Python path raises ``zmq.Again`` there) and the link's ``send``; and ``BrokerCore.receive`` for the
   request and the reply (no sockets). Weighted by the calls per request that cProfile counts (step 3), they
   explain the Python thread's CPU per request; the rest is the loop itself and what the steps cost more in the
   real run;
3. the same run under cProfile (thread CPU time), for call counts per request and the top functions by self
   time. cProfile inflates Python-heavy code, so its shares are shown for orientation only.
"""

from __future__ import annotations

import os
import pstats
import tempfile
import time
from typing import Any

import zmq

from bench.config import Config, say
from bench.core_scaling import dispatch_cost
from bench.load import GdDriver, pipelined_run
from bench.procs import Children, cpu_seconds

# cProfile shares: (component, needles matched against the end of "file:function"), cumulative time.
COMPONENTS = (
    ("poll", ("zmq/sugar/poll.py:poll", "~:<built-in method generaldomo.io._speedups.poll>")),
    ("link.recv", ("generaldomo/io/hub/links.py:recv_batch",)),
    ("core.receive", ("generaldomo/sansio/broker/core/core.py:receive",)),
    ("link.send", ("generaldomo/io/hub/links.py:send",)),
    ("core.tick", ("generaldomo/sansio/broker/core/core.py:tick",)),
)
LOOP = "generaldomo/io/broker.py:run"


def run(cfg: Config, children: Children) -> dict[str, Any]:
    """Profile the broker over each available transport."""
    from generaldomo.io.transport import draft_available

    transports = [t for t in cfg.transports if t == "router" or draft_available()]
    return {"rows": [profile_transport(t, cfg, children) for t in transports]}


def profile_transport(transport: str, cfg: Config, children: Children) -> dict[str, Any]:
    """The plain run, the parts measured alone, the profiled run."""
    plain = _run_once(transport, cfg, children, None)
    with tempfile.TemporaryDirectory(prefix="gdprof-") as tmpdir:
        path = os.path.join(tmpdir, "broker.prof")
        profiled = _run_once(transport, cfg, children, path)
        stats = pstats.Stats(path)
    shares, counts, top = _cprofile(stats, profiled["n"])
    links = link_costs(transport, min(cfg.profile_n, 20000))
    core = dispatch_cost(1, 1, min(cfg.profile_n, 20000))
    polls, batches = counts["poll"], counts["link.recv"]
    parts = [
        (f"poll: {polls:.2f} per request (block, wake up)", polls * links["poll_us"], "poll"),
        (f"link.recv_batch: 2 messages in, {batches:.2f} batches", 2 * links["recv_us"], "link.recv"),
        (
            f"link.recv_batch: the look that ends a batch, {batches:.2f} per request",
            batches * links["again_us"],
            None,
        ),
        (
            "core.receive: request + reply (parse, state machine, build frames)",
            core["dispatch_us"] + core["complete_us"],
            "core.receive",
        ),
        ("link.send: 2 messages out", 2 * links["send_us"], "link.send"),
    ]
    main_us = plain["main_cpu_us_per_req"]
    rest = main_us - sum(us for _, us, _ in parts)
    parts.append(("the rest: event loop, clock, tick, and what the parts cost more under load", rest, None))
    return {
        "transport": transport,
        "scheme": "tcp",
        **{k: plain[k] for k in ("n", "rps", "cpu_us_per_req", "main_cpu_us_per_req", "io_cpu_us_per_req")},
        "profiled_rps": profiled["rps"],
        "components": [
            {"component": name, "us_per_req": us, "share": us / main_us, "cprofile_share": shares.get(key or "", None)}
            for name, us, key in parts
        ],
        "link_costs": links,
        "core_costs": core,
        "calls_per_req": counts,
        "top": top,
    }


def _run_once(transport: str, cfg: Config, children: Children, profile: str | None) -> dict[str, float]:
    from generaldomo import Client

    args = ["gd-broker", transport, "tcp://127.0.0.1:*", *([profile] if profile else [])]
    broker, address = children.spawn(*args)
    worker, _ = children.spawn("gd", "worker", "--transport", transport, "--connect", address, "--service", "echo")
    driver = GdDriver(lambda: Client(address, transport), "echo")
    try:
        pipelined_run(driver, b"warm", 200, 5.0, cfg.window)
        total0, main0 = cpu_seconds(broker.pid), cpu_seconds(broker.pid, broker.pid)
        result = pipelined_run(driver, b"x" * 16, cfg.profile_n, max(cfg.seconds, 60.0), cfg.window)
        total, main = cpu_seconds(broker.pid) - total0, cpu_seconds(broker.pid, broker.pid) - main0
    finally:
        driver.close()
        children.stop(worker)
        children.stop(broker, timeout=30)  # the profiled broker writes its stats on the way out
    n = result["n"]
    kind = "profiled" if profile else "plain"
    say(f"profile {transport} ({kind}): {n} pipelined requests at {result['rps']:,.0f} req/s")
    return {
        "n": n,
        "rps": result["rps"],
        "cpu_us_per_req": total / n * 1e6,
        "main_cpu_us_per_req": main / n * 1e6,
        "io_cpu_us_per_req": (total - main) / n * 1e6,
    }


def _cprofile(stats: pstats.Stats, n: int) -> tuple[dict[str, float], dict[str, float], list[dict[str, Any]]]:
    """Cumulative share of the loop per component, calls per request per component, top functions by self time."""
    raw = stats.stats  # type: ignore[attr-defined]
    rows = [(f"{filename}:{name}", calls, cum) for (filename, _, name), (_, calls, _, cum, _) in raw.items()]
    total = sum(cum for label, _, cum in rows if label.endswith(LOOP)) or 1.0
    shares, counts = {}, {}
    for component, needles in COMPONENTS:
        matched = [(calls, cum) for label, calls, cum in rows if any(label.endswith(x) for x in needles)]
        shares[component] = sum(cum for _, cum in matched) / total
        counts[component] = sum(calls for calls, _ in matched) / n
    functions = []
    for (filename, line, name), (_, calls, tottime, _, _) in raw.items():
        short = f"{os.path.basename(filename)}:{line}({name})" if filename != "~" else name
        functions.append({"function": short, "calls_per_req": calls / n, "self_us_per_req": tottime / n * 1e6})
    functions.sort(key=lambda f: -f["self_us_per_req"])
    return shares, counts, functions[:15]


def link_costs(transport: str, count: int) -> dict[str, float]:
    """Thread CPU µs of each step of the broker loop for one message at a time, as in a lightly loaded broker.

    A peer socket (DEALER or CLIENT) in this process sends one message of a request's two inbound shapes over
    loopback tcp; the link's socket is polled as the broker polls it (with its stop pipe), read as a batch of
    one, read again (finding nothing, which ends a batch: pure Python raises ``zmq.Again`` there), and one message
    of the two outbound shapes is sent back. Poll time includes the kernel's cost of blocking and waking up.
    Whether the link runs on the C accelerator is :mod:`generaldomo.io.speedups`' choice, as in the broker.
    """
    from generaldomo.io.broker import waiter
    from generaldomo.io.hub.links import LINKS
    from generaldomo.io.inproc import resolve
    from generaldomo.sansio.wire import codec, protocol
    from generaldomo.sansio.wire.events import Dialect

    body = [b"x" * 16]
    rid, tid = b"r" * 16, b"t" * 12
    inbound = [protocol.gdp_request(rid, b"echo", body), protocol.gdp_ready(b"echo", (tid, protocol.OK, body))]
    outbound = [
        protocol.worker_request(Dialect.GDP, tid, b"echo", body),
        protocol.client_reply(Dialect.GDP, rid, b"echo", protocol.OK, body, True),
    ]
    context = zmq.Context()
    link = LINKS[transport](context, ["tcp://127.0.0.1:*"])
    stop, stop_write = os.pipe()
    peer = context.socket(zmq.DEALER if transport == "router" else zmq.CLIENT)
    peer.setsockopt(zmq.LINGER, 0)
    peer.connect(resolve(link.endpoints[0]))
    wait = waiter([link.socket], (stop,))

    def peer_send(frames: list[bytes]) -> None:
        if transport == "router":
            peer.send_multipart(frames)
        else:
            peer.send(codec.encode(frames))

    clock = time.thread_time_ns
    steps = {"poll_us": 0, "recv_us": 0, "again_us": 0, "send_us": 0}
    try:
        peer_send([b"hello"])
        if not wait(5000):
            raise RuntimeError("link micro-benchmark: no hello")
        address = link.recv_batch(1)[0][0]
        for i in range(count):
            peer_send(inbound[i % 2])
            t0 = clock()
            ready = wait(5000)
            t1 = clock()
            got = link.recv_batch(1)
            t2 = clock()
            empty = link.recv_batch(256)
            t3 = clock()
            link.send(address, outbound[i % 2])
            t4 = clock()
            if not ready or len(got) != 1 or empty or not peer.poll(5000):
                raise RuntimeError("link micro-benchmark: a message was lost")
            peer.recv_multipart()
            for key, spent in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                steps[key] += spent
    finally:
        os.close(stop)
        os.close(stop_write)
        peer.close(linger=0)
        link.close(0)
        context.term()
    return {key: spent / count / 1e3 for key, spent in steps.items()}
