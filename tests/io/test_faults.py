"""Faults with real processes: workers killed or paused mid-task, a broker killed and restarted, chaos."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from waiting import eventually

from generaldomo import Client
from generaldomo.sansio.broker.core import Settings

HEARTBEAT = ["--heartbeat", "0.1", "--liveness", "3"]
FAST = Settings(heartbeat_interval=0.1, liveness=3, max_attempts=3)


class Processes:
    """Worker and broker processes started with the CLI; all killed at the end."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []

    def worker(self, endpoint: str, transport: str, *args: str) -> subprocess.Popen:
        return self.spawn("worker", "--transport", transport, "--connect", endpoint, *HEARTBEAT, *args)

    def spawn(self, *args: str) -> subprocess.Popen:
        command = [sys.executable, "-m", "generaldomo", *args]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
        for process in self.started:
            process.wait(10)


@pytest.fixture
def processes() -> Iterator[Processes]:
    running = Processes()
    yield running
    running.stop_all()


def busy_workers(broker) -> list:
    return [w for w in broker.core.workers.values() if w.task is not None]


def test_worker_killed_mid_task_is_reissued_and_answered_once(transport, brokers, processes) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=FAST)
    endpoint = broker.endpoint(transport, "tcp")
    doomed = processes.worker(endpoint, transport, "--sleep", "30", "--tag", "doomed")
    with Client(endpoint, transport, heartbeat_interval=0.1, fail_unknown=False) as client:
        future = client.submit("echo", b"task")
        eventually(lambda: busy_workers(broker), what="the task to be dispatched")
        doomed.kill()  # SIGKILL: no DISCONNECT, the broker must notice the silence
        processes.worker(endpoint, transport, "--tag", "rescuer")
        assert future.result(30).payload == b"rescuer:task"
        assert broker.core.counters["reissued"] == 1 and broker.core.counters["workers_expired"] == 1
        time.sleep(0.3)
        assert client.replies_dropped == 0


def test_paused_worker_comes_back_and_its_late_result_is_dropped(transport, brokers, processes) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=FAST)
    endpoint = broker.endpoint(transport, "tcp")
    sleeper = processes.worker(endpoint, transport, "--sleep", "1.0", "--tag", "sleeper")
    eventually(lambda: broker.core.workers, what="the first worker")
    with Client(endpoint, transport, heartbeat_interval=0.1, fail_unknown=False) as client:
        future = client.submit("echo", b"task")
        eventually(lambda: busy_workers(broker), what="the task to be dispatched")
        sleeper.send_signal(signal.SIGSTOP)
        eventually(lambda: broker.core.counters["workers_expired"] == 1, what="the paused worker to expire")
        processes.worker(endpoint, transport, "--tag", "rescuer")
        assert future.result(30).payload == b"rescuer:task"
        sleeper.send_signal(signal.SIGCONT)  # finishes its sleep and returns its result: too late
        eventually(lambda: broker.core.counters["duplicates_dropped"] >= 1, what="the late result")
        assert client.replies_dropped == 0
        assert client.request("echo", b"more", timeout=30).payload.endswith(b":more")  # both keep serving


def test_broker_restart_with_live_clients_and_workers(transport, processes) -> None:
    def start_broker(endpoint: str) -> tuple[subprocess.Popen, str]:
        for _ in range(50):  # the port of a killed broker may take a moment to be free
            broker = processes.spawn("broker", "--transport", transport, "--bind", endpoint, *HEARTBEAT)
            line = broker.stdout.readline()
            if line.startswith("generaldomo broker:"):
                return broker, line.split()[-1]
            broker.wait(10)
            time.sleep(0.1)
        raise AssertionError(f"no broker could bind {endpoint}")

    broker, endpoint = start_broker("tcp://127.0.0.1:*")
    for n in range(2):
        processes.worker(endpoint, transport, "--sleep", "0.2", "--tag", f"w{n}")
    with Client(endpoint, transport, heartbeat_interval=0.1, fail_unknown=False) as client:
        assert client.request("echo", b"warm-up", timeout=30)
        futures = {n: client.submit("echo", b"%d" % n) for n in range(40)}
        time.sleep(0.5)  # some answered, some running, some queued
        broker.kill()
        broker.wait(10)
        start_broker(endpoint)
        for n, future in futures.items():
            assert future.result(60).payload.split(b":", 1)[1] == b"%d" % n
        assert client.resent > 0
        assert client.request("echo", b"after", timeout=30).payload.endswith(b":after")


@pytest.mark.slow
def test_chaos_workers_killed_and_restarted_throughout(transport, brokers, processes) -> None:
    """>= 500 tasks, 4 worker processes, random SIGKILLs and restarts: every result delivered exactly once.

    The kills are paced by progress, not by the clock: each waits until a few more answers came since the last
    one. On a loaded machine a worker process takes a second or more to start and register, longer than the
    time between kills, so kills on the clock alone left the pool starting up most of the time and the test
    ran into its deadline with requests unanswered (nothing lost: they were still queued)."""
    chaos = random.Random(7)
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=Settings(0.1, 3, max_attempts=100))
    endpoint = broker.endpoint(transport, "tcp")
    pool = [processes.worker(endpoint, transport, "--sleep", "0.01") for _ in range(4)]
    tasks = 600
    kills = 0
    with Client(endpoint, transport, heartbeat_interval=0.1, fail_unknown=False) as client:
        futures = [client.submit("echo", b"task-%d" % n) for n in range(tasks)]
        deadline = time.monotonic() + 240
        answered_at_last_kill = 0
        while (answered := sum(f.done() for f in futures)) < tasks:
            assert time.monotonic() < deadline, f"{tasks - answered} tasks never answered"
            time.sleep(chaos.uniform(0.05, 0.3))
            if answered < answered_at_last_kill + chaos.randint(1, 12):
                continue
            answered_at_last_kill = answered
            victim = chaos.randrange(len(pool))
            pool[victim].kill()
            kills += 1
            pool[victim] = processes.worker(endpoint, transport, "--sleep", "0.01")
        results = [f.result(0).payload for f in futures]
        time.sleep(0.5)  # let any straggling duplicate arrive
        assert client.replies_dropped == 0
    assert results == [b"task-%d" % n for n in range(tasks)]
    assert kills >= 5
    assert broker.core.counters["completed"] == tasks and not broker.core.tasks


def test_worker_stopped_mid_task_says_so_and_the_task_is_reissued_at_once(transport, brokers, processes) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=Settings(heartbeat_interval=2.5, liveness=3))
    endpoint = broker.endpoint(transport, "tcp")
    leaving = processes.spawn("worker", "--transport", transport, "--connect", endpoint, "--sleep", "60")
    with Client(endpoint, transport, fail_unknown=False) as client:
        future = client.submit("echo", b"task")
        eventually(lambda: busy_workers(broker), what="the task to be dispatched")
        leaving.send_signal(signal.SIGTERM)
        assert leaving.wait(20) == 0  # it does not sit out its 60 s task
        eventually(lambda: broker.core.counters["reissued"] == 1, what="the reissue")
        assert broker.core.counters["workers_expired"] == 0  # told, not presumed dead
        processes.spawn("worker", "--transport", transport, "--connect", endpoint, "--tag", "next")
        assert future.result(30).payload == b"next:task"
