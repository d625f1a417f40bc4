"""generaldomo on Ray (generaldomo.ray): pools of actor workers and Ray tasks as clients, on a local Ray.

Ray runs on this machine only (node address and binds on 127.0.0.1, no dashboard, no usage statistics),
started once for the module with 2 CPUs and stopped at the end; the broker listens on tcp://127.0.0.1:*
so that Ray's worker processes reach it. Every wait is bounded; the only bounds on times are generous.
"""

from __future__ import annotations

import binascii
import os
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

if os.environ.get("CI"):
    import ray  # CI installs the extra: these tests run there, never skipped
else:
    ray = pytest.importorskip("ray")

from waiting import eventually

import generaldomo.ray as gdray
from generaldomo import Broker, Client, Reply
from generaldomo.sansio.broker.services.resolvers.attributes import AttributeResolver
from generaldomo.sansio.config.settings import Settings

HEARTBEAT = 0.25
LIVENESS = 4
WORKER_OPTIONS: dict[str, Any] = {"heartbeat_interval": HEARTBEAT, "liveness": LIVENESS}
T4, A100 = '{"service": "fft", "gpu": "t4"}', '{"service": "fft", "gpu": "a100"}'
SLOTS = 8  # the custom resource the pools' actors ask for (they take no CPU, leaving both to the tasks)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    broker = Broker("router", ["tcp://127.0.0.1:*"], settings=Settings(heartbeat_interval=HEARTBEAT, liveness=LIVENESS))
    broker.start()
    try:
        yield broker.endpoint("router", "tcp")
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def local_ray(endpoint: str) -> Iterator[None]:
    here = os.path.dirname(os.path.abspath(__file__))  # this module, and the shared helpers one folder up
    environment = {"GENERALDOMO_BROKER": endpoint, "PYTHONPATH": os.pathsep.join([here, os.path.dirname(here)])}
    gdray.start_local(
        num_cpus=2, resources={"gd_slot": SLOTS}, runtime_env={"env_vars": environment}, log_to_driver=False
    )
    try:
        yield
    finally:
        gdray.close()
        ray.shutdown()


def pool(description: str, handler: Any, size: int, **options: Any) -> gdray.WorkerPool:
    """A pool of actors that take no CPU, one custom slot each."""
    options = {"num_cpus": 0, "resources": {"gd_slot": 1}, "worker_options": WORKER_OPTIONS, **options}
    return gdray.WorkerPool(None, description, handler, size, **options)


def service(client: Client, name: str) -> dict[str, Any]:
    """The broker's status entry of one service ({} before it exists)."""
    services: dict[str, dict[str, Any]] = {s["name"]: s for s in client.status()["services"]}
    return services.get(name, {})


def registered(client: Client, name: str, count: int) -> bool:
    return bool(service(client, name).get("workers", 0) == count)


def sleep_then_pid(payload: bytes) -> bytes:
    """Work for ``payload`` seconds; answer with the serving process's pid."""
    time.sleep(float(payload))
    return b"%d" % os.getpid()


@ray.remote(num_cpus=0.5)
def hex_task(n: int) -> tuple[int, bytes, int]:
    """One Ray task, one request through this process's shared client."""
    return n, gdray.request("hex", b"%d" % n, timeout=60).payload, os.getpid()


def timed_work(payload: bytes) -> bytes:
    """Work for ``payload`` seconds; answer with when the work started and ended (this process's clock)."""
    start = time.monotonic()
    time.sleep(float(payload))
    return struct.pack("!dd", start, time.monotonic())


@ray.remote(num_cpus=0.5)
def burst_task(count: int) -> list[dict[str, float]]:
    """``count`` requests at once from one Ray task: each reply's times, the work's span, the task's pid.
    ``dispatched`` = sent + queued, on the machine's monotonic clock."""
    client = gdray.client(None, heartbeat_interval=HEARTBEAT, liveness=LIVENESS)
    futures: list[Future[Reply]] = [client.submit("limited", b"0.2") for _ in range(count)]
    times = []
    for reply in (future.result(120) for future in futures):
        assert reply.sent is not None and reply.queued is not None and reply.served is not None
        start, end = struct.unpack("!dd", reply.payload)
        dispatched = reply.sent + reply.queued
        spans = {"start": start, "end": end, "pid": os.getpid()}
        times.append({"dispatched": dispatched, "queued": reply.queued, "served": reply.served, **spans})
    return times


def test_load_handler_takes_callables_and_module_attr_text() -> None:
    assert gdray.load_handler("binascii:hexlify") is binascii.hexlify
    assert gdray.load_handler(sleep_then_pid) is sleep_then_pid
    assert gdray.load_handler("os.path:join") is os.path.join
    with pytest.raises(ValueError):
        gdray.load_handler("binascii")
    with pytest.raises(TypeError):
        gdray.load_handler("os:sep")


def test_pool_of_two_actors_serves_a_fan_out_of_200_ray_tasks(local_ray: None, endpoint: str) -> None:
    client = gdray.client(endpoint)
    with pool("hex", "binascii:hexlify", 2) as workers:
        infos = workers.wait()
        eventually(lambda: registered(client, "hex", 2), what="two workers registered")  # else a 404 may come
        assert len({info["pid"] for info in infos}) == 2
        results = ray.get([hex_task.remote(n) for n in range(200)], timeout=180)
        assert sorted(n for n, _, _ in results) == list(range(200))
        assert all(payload == binascii.hexlify(b"%d" % n) for n, payload, _ in results)
        assert sum(info["done"] for info in workers.info()) == 200  # each ran once: no fault, no rerun
        assert os.getpid() not in {pid for _, _, pid in results}


def test_an_actor_killed_mid_task_has_its_task_reissued(local_ray: None, endpoint: str) -> None:
    client = gdray.client(endpoint)
    with pool("slow", sleep_then_pid, 2, max_restarts=0) as workers:
        workers.wait()
        eventually(lambda: registered(client, "slow", 2), what="two workers registered")
        future = client.submit("slow", b"3")  # long enough to be caught running
        busy = eventually(
            lambda: [n for n, info in enumerate(workers.info()) if info.get("running")], what="a worker busy"
        )
        victim, survivor = workers.actors[busy[0]], workers.actors[1 - busy[0]]
        survivor_pid = ray.get(survivor.info.remote())["pid"]
        ray.kill(victim, no_restart=True)
        assert future.result(60).payload == b"%d" % survivor_pid
        assert service(client, "slow")["reissued"] >= 1


def test_an_actor_ray_restarts_registers_again(local_ray: None, endpoint: str) -> None:
    client = gdray.client(endpoint)
    with pool("restarted", sleep_then_pid, 1, max_restarts=1) as workers:
        [before] = workers.wait()
        ray.kill(workers.actors[0], no_restart=False)
        eventually(
            lambda: workers.info(timeout=5)[0].get("pid", before["pid"]) != before["pid"],
            timeout=60,
            what="the actor restarted",
        )
        [after] = workers.info()
        eventually(lambda: registered(client, "restarted", 1), timeout=30, what="the old worker forgotten")
        assert client.request("restarted", b"0", timeout=30).payload == b"%d" % after["pid"]


def test_pool_grows_and_shrinks_at_run_time_with_a_description_per_actor(local_ray: None, endpoint: str) -> None:
    client = gdray.client(endpoint)
    with pool("elastic", sleep_then_pid, 1) as workers:
        workers.grow(2)
        workers.grow(1, description="elastic-big", resources={"gd_slot": 2})
        assert len(workers) == 4
        infos = workers.wait()
        assert [info["description"] for info in infos] == ["elastic"] * 3 + ["elastic-big"]
        eventually(lambda: registered(client, "elastic", 3), what="three elastic workers")
        eventually(lambda: registered(client, "elastic-big", 1), what="one elastic-big worker")
        stopped = workers.shrink(2)
        assert len(workers) == 2 and len(stopped) == 2 and all(info["workers"] == 0 for info in stopped)
        eventually(
            lambda: (
                service(client, "elastic").get("workers", 0) + service(client, "elastic-big").get("workers", 0) == 2
            ),
            what="two workers left",
        )
        workers.resize(3)
        assert len(workers.wait()) == 3


def test_the_attributes_resolver_prefers_the_actors_whose_description_it_ranks_first(local_ray: None) -> None:
    settings = Settings(heartbeat_interval=HEARTBEAT, liveness=LIVENESS)
    resolver = AttributeResolver(prefer="gpu:a100,t4")
    broker = Broker("router", ["tcp://127.0.0.1:*"], resolver=resolver, settings=settings).start()
    endpoint = broker.endpoint("router", "tcp")
    options: dict[str, Any] = {"num_cpus": 0, "resources": {"gd_slot": 1}, "worker_options": WORKER_OPTIONS}
    try:
        with Client(endpoint) as client, gdray.WorkerPool(endpoint, T4, sleep_then_pid, 1, **options) as workers:
            workers.grow(1, description=A100)
            t4, a100 = workers.wait()
            eventually(lambda: registered(client, "fft", 2), what="both fft workers")
            answers = {client.request('{"service": "fft"}', b"0", timeout=30).payload for _ in range(6)}
            assert answers == {b"%d" % a100["pid"]}  # the a100 actor, free again each time
            assert client.request(T4, b"0", timeout=30).payload == b"%d" % t4["pid"]
    finally:
        broker.stop()


def test_flow_limits_hold_across_ray_tasks_in_several_processes(local_ray: None, endpoint: str) -> None:
    rate, concurrency, tasks, per_task = 10.0, 2, 4, 10
    client = gdray.client(endpoint)
    with pool("limited", timed_work, 1, threads=4) as workers:
        workers.wait()
        eventually(lambda: registered(client, "limited", 4), what="four workers in one actor")
        client.flow("limited", rate=rate, burst=1, concurrency=concurrency)
        batches = ray.get([burst_task.remote(per_task) for _ in range(tasks)], timeout=180)
    times = [entry for batch in batches for entry in batch]
    assert len(times) == tasks * per_task
    assert len({entry["pid"] for entry in times}) >= 2, "the tasks ran in several Ray worker processes"
    for key in ("dispatched", "start"):  # the broker's dispatches as the replies tell; the work's starts
        moments = sorted(entry[key] for entry in times)
        assert (len(moments) - 1) / (moments[-1] - moments[0]) <= rate * 1.25, key
    assert all(entry["served"] >= entry["end"] - entry["start"] for entry in times)  # serving spans the work
    # the work's spans, all on the one actor process's clock: never more at once than the cap
    edges = sorted([(entry["start"], 1) for entry in times] + [(entry["end"], -1) for entry in times])
    level = peak = 0
    for _, change in edges:
        level += change
        peak = max(peak, level)
    assert peak <= concurrency
    assert max(entry["queued"] for entry in times) > 0.5  # the limits held requests back


def test_one_client_per_process_shared_by_threads_and_closed_at_exit(endpoint: str) -> None:
    seen: list[Client] = []
    threads = [threading.Thread(target=lambda: seen.append(gdray.client(endpoint))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(seen) == 8 and len({id(c) for c in seen}) == 1
    gdray.close()
    assert gdray.client(endpoint) is not seen[0]
    script = "import generaldomo.ray as g; c = g.client(); print(c.status(timeout=30)['broker'] is not None)"
    run = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "GENERALDOMO_BROKER": endpoint},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and run.stdout.strip() == "True", run.stderr
