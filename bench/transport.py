"""Parts 1 and 2: transport overhead and broker CPU per message.

generaldomo's broker over ROUTER and SERVER links, on tcp (127.0.0.1), ipc and inproc, with 1 and 4 workers,
against the brokerless baseline of the same sockets (DEALER to a ROUTER echo peer, CLIENT to a SERVER echo
peer), all measured in one interleaved run.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from bench.config import Config, say
from bench.load import pipelined_run
from bench.procs import Children
from bench.runner import Measurement, run_interleaved
from bench.stacks import Stack, echo_stack, gd_stack

MODES = ("sync", "pipelined")


def available_transports(cfg: Config) -> tuple[list[str], list[str]]:
    """The transports to measure, and notes about any left out."""
    from generaldomo.io.transport import draft_available

    if "server" in cfg.transports and not draft_available():
        return [t for t in cfg.transports if t != "server"], ["server transport skipped: pyzmq lacks draft sockets"]
    return list(cfg.transports), []


def run(cfg: Config, children: Children) -> dict[str, Any]:
    """Set up every stack, measure them interleaved, tear them down."""
    transports, notes = available_transports(cfg)
    stacks: list[tuple[dict[str, Any], Stack]] = []
    with tempfile.TemporaryDirectory(prefix="gdbench-") as tmpdir:
        try:
            for scheme in cfg.schemes:
                for transport in transports:
                    say(f"transport: starting generaldomo {transport} broker and workers, and echo peer, over {scheme}")
                    base = {"transport": transport, "scheme": scheme}
                    stacks.append(
                        ({**base, "system": "generaldomo"}, gd_stack(transport, scheme, cfg.workers, children, tmpdir))
                    )
                    stacks.append(({**base, "system": "baseline"}, echo_stack(transport, scheme, children, tmpdir)))
            settle(stacks, cfg)
            items = [
                Measurement(stack, {**base, "payload": payload, "workers": workers, "mode": mode})
                for payload in cfg.payloads
                for workers in cfg.workers
                for mode in MODES
                for base, stack in stacks
                if base["system"] == "generaldomo"
            ] + [
                Measurement(stack, {**base, "payload": payload, "workers": 0, "mode": mode})
                for payload in cfg.payloads
                for mode in MODES
                for base, stack in stacks
                if base["system"] == "baseline"
            ]
            items.sort(key=lambda m: (m.key["payload"], m.key["mode"], m.key["workers"] > 1))
            rows, errors = run_interleaved(items, cfg, "transport")
        finally:
            for _, stack in stacks:
                stack.close()
    return {"rows": rows, "errors": errors, "notes": notes}


def settle(stacks: list[tuple[dict[str, Any], Stack]], cfg: Config) -> None:
    """Warm every driver up so that all workers have registered before anything is measured."""
    for _, stack in stacks:
        for driver in stack.drivers.values():
            pipelined_run(driver, b"warm", 4 * max(cfg.workers) * 5, 2.0, 4 * max(cfg.workers))
            driver.idle()
    time.sleep(0.3)
