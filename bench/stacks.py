"""Stacks: a broker (or echo peer) plus its workers and a client driver, set up once and measured many times.

tcp and ipc stacks run the broker and each worker in its own process (:mod:`bench.peer`); inproc stacks run
the broker and workers in threads of this process. Each stack names the process (and thread) whose CPU time
is the broker's.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq

from bench.load import Driver, GdDriver, MajortomoDriver, SocketDriver
from bench.peer import serve_echo
from bench.procs import Children, free_port


@dataclass
class Stack:
    """One system under test, ready for requests."""

    label: str
    drivers: dict[int, Driver]  # by number of workers (0 for the brokerless echo)
    cpu: tuple[int, int | None]  # (pid, thread id or None) of the broker or echo peer
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    workers: list[int] = field(default_factory=list)  # pids of worker processes (tcp and ipc stacks)

    def close(self) -> None:
        """Close drivers, then whatever the stack started, newest first."""
        for driver in self.drivers.values():
            with contextlib.suppress(Exception):
                driver.close()
        for step in reversed(self.cleanup):
            with contextlib.suppress(Exception):
                step()


def endpoint(scheme: str, tmpdir: str, name: str) -> str:
    """A bindable endpoint of ``scheme``: loopback tcp on a port picked by the kernel, ipc in ``tmpdir``."""
    if scheme == "tcp":
        return "tcp://127.0.0.1:*"
    if scheme == "ipc":
        return f"ipc://{tmpdir}/{name}.sock"
    return f"inproc://bench-{name}-{uuid.uuid4().hex[:8]}"


def services(workers: tuple[int, ...]) -> dict[int, str]:
    """One service per worker count, so one broker serves every count: ``{1: "echo1", 4: "echo4"}``."""
    return {n: f"echo{n}" for n in workers}


def gd_stack(transport: str, scheme: str, workers: tuple[int, ...], children: Children, tmpdir: str) -> Stack:
    """A generaldomo broker (``generaldomo broker`` process, or a thread for inproc), workers and a Client."""
    from generaldomo import Broker, Client, Worker

    bind = endpoint(scheme, tmpdir, f"gd-{transport}")
    names = services(workers)
    if scheme != "inproc":
        proc, banner = children.spawn("gd", "broker", "--transport", transport, "--bind", bind)
        address = banner.split()[-1]
        pids = [
            children.spawn("gd", "worker", "--transport", transport, "--connect", address, "--service", service)[0].pid
            for count, service in names.items()
            for _ in range(count)
        ]
        drivers = _gd_drivers(lambda: Client(address, transport), names)
        return Stack(f"gd-{transport}-{scheme}", drivers, (proc.pid, None), workers=pids)
    broker = Broker(transport, [bind])
    thread = threading.Thread(target=broker.run, name=f"bench-broker-{transport}", daemon=True)
    thread.start()
    stack = Stack(f"gd-{transport}-{scheme}", {}, (os.getpid(), None))
    stack.cleanup += [lambda: thread.join(5), broker.stop]
    for count, service in names.items():
        for _ in range(count):
            worker = Worker(bind, service, _echo, transport)
            worker_thread = threading.Thread(target=worker.serve, daemon=True)
            worker_thread.start()
            stack.cleanup += [lambda t=worker_thread: t.join(5), worker.stop]
    stack.drivers = _gd_drivers(lambda: Client(bind, transport), names)
    stack.cpu = (os.getpid(), thread.native_id)
    return stack


def _echo(payload: bytes | tuple[bytes, ...]) -> bytes | tuple[bytes, ...]:
    return payload


def _gd_drivers(make_client: Callable[[], object], names: dict[int, str]) -> dict[int, Driver]:
    return {count: GdDriver(make_client, service) for count, service in names.items()}


def echo_stack(kind: str, scheme: str, children: Children, tmpdir: str) -> Stack:
    """The brokerless baseline: a DEALER (``router``) or CLIENT (``server``) straight to an echo peer."""
    context = zmq.Context.instance()
    bind = endpoint(scheme, tmpdir, f"echo-{kind}")
    label = f"echo-{kind}-{scheme}"
    if scheme != "inproc":
        proc, address = children.spawn("echo", kind, bind)
        return Stack(label, {0: SocketDriver(context, address, kind)}, (proc.pid, None))
    sock = context.socket(zmq.ROUTER if kind == "router" else zmq.SERVER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(bind)
    running = threading.Event()
    running.set()
    thread = threading.Thread(target=serve_echo, args=(sock, kind, running.is_set), daemon=True)
    thread.start()
    stack = Stack(label, {0: SocketDriver(context, bind, kind)}, (os.getpid(), thread.native_id))
    stack.cleanup += [sock.close, lambda: thread.join(5), running.clear]
    return stack


def majortomo_stack(broker: str, workers: tuple[int, ...], window: int, children: Children) -> Stack:
    """majortomo's client and workers over loopback tcp, through the ``majortomo`` or the generaldomo broker."""
    names = services(workers)
    if broker == "majortomo":
        address = f"tcp://127.0.0.1:{free_port()}"
        proc, _ = children.spawn("mt-broker", address)
    else:
        proc, banner = children.spawn("gd", "broker", "--transport", "router", "--bind", "tcp://127.0.0.1:*")
        address = banner.split()[-1]
    pids = [
        children.spawn("mt-worker", address, service)[0].pid for count, service in names.items() for _ in range(count)
    ]
    drivers: dict[int, Driver] = {count: MajortomoDriver(address, service, window) for count, service in names.items()}
    return Stack(f"{broker}-broker+majortomo-peers", drivers, (proc.pid, None), workers=pids)
