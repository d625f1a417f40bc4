"""Part 5: peers. The same sync and pipelined workloads, over loopback tcp, through

- the ``majortomo`` broker with majortomo's own client and echo worker,
- the generaldomo broker (ROUTER link) with the same majortomo client and worker (same peers, other broker),
- the generaldomo broker with generaldomo's Client and Worker (ROUTER and, with draft sockets, SERVER),

interleaved in one run. majortomo's client allows one outstanding request, so its pipelined mode uses a pool
of ``window`` clients, one request each.
"""

from __future__ import annotations

import tempfile
from typing import Any

from bench.config import Config, say
from bench.procs import Children
from bench.runner import Measurement, run_interleaved
from bench.stacks import Stack, gd_stack, majortomo_stack
from bench.transport import MODES, available_transports, settle

REQUIREMENT = "majortomo==0.2.0"
WORKERS = (1,)


def majortomo_version() -> str | None:
    """The installed majortomo version, or None when it is not importable."""
    try:
        import majortomo  # noqa: F401
    except ImportError:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("majortomo")
    except PackageNotFoundError:
        return "unknown"


def run(cfg: Config, children: Children) -> dict[str, Any]:
    """Measure the peer stacks side by side; without majortomo, say so and measure nothing."""
    found = majortomo_version()
    if found is None:
        note = f"majortomo not installed (pip install '{REQUIREMENT}'): peers part skipped"
        say(f"peers: {note}")
        return {"rows": [], "errors": [], "notes": [note], "majortomo": None}
    transports, notes = available_transports(cfg)
    stacks: list[tuple[dict[str, Any], Stack]] = []
    with tempfile.TemporaryDirectory(prefix="gdbench-") as tmpdir:
        try:
            say("peers: starting majortomo broker + majortomo workers")
            base = {"scheme": "tcp", "peers": "majortomo"}
            stacks.append(({**base, "system": "majortomo", "transport": "router"}, _mt(cfg, children, "majortomo")))
            say("peers: starting generaldomo broker + majortomo workers")
            stacks.append(({**base, "system": "generaldomo", "transport": "router"}, _mt(cfg, children, "gd")))
            for transport in transports:
                say(f"peers: starting generaldomo {transport} broker + generaldomo workers")
                stack = gd_stack(transport, "tcp", WORKERS, children, tmpdir)
                stacks.append(
                    ({"scheme": "tcp", "peers": "generaldomo", "system": "generaldomo", "transport": transport}, stack)
                )
            settle(stacks, cfg)
            items = [
                Measurement(stack, {**key, "payload": payload, "workers": workers, "mode": mode})
                for payload in cfg.peer_payloads
                for workers in WORKERS
                for mode in MODES
                for key, stack in stacks
            ]
            rows, errors = run_interleaved(items, cfg, "peers")
        finally:
            for _, stack in stacks:
                stack.close()
    notes.append(f"majortomo {found}: pipelined mode uses a pool of {cfg.window} majortomo clients (one request each)")
    return {"rows": rows, "errors": errors, "notes": notes, "majortomo": found}


def _mt(cfg: Config, children: Children, broker: str) -> Stack:
    return majortomo_stack(broker, WORKERS, cfg.window, children)
