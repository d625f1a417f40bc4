"""Running apps with concurrency: process and thread pools, each slot a registration; graceful stop."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from app_harness import start_pool, wait_for_workers, wait_until

from generaldomo import Client, RequestFailed, TypedClient
from generaldomo.peers.app import load
from generaldomo.peers.pool import make_pool
from generaldomo.peers.slots import SlotOptions
from generaldomo.sansio.broker.core import Settings

FAST = Settings(heartbeat_interval=0.25, liveness=4)
HEARTBEAT = ["--heartbeat", "0.25", "--liveness", "4"]


def test_process_pool_serves_two_services_with_a_slot_each(transport: str, brokers, tmp_path: Path) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    pool = start_pool(
        "tests.apps:app", endpoint, transport, tmp_path / "pool.log", "--concurrency", "4", "--pool", "process"
    )
    try:
        with Client(endpoint, transport) as client:
            wait_for_workers(client, {"square": 4, "upper": 4})
            typed = TypedClient(client, "json")
            squares = [typed.submit("square", [n, n + 1]) for n in range(40)]
            uppers = [client.submit("upper", f"word {n}".encode()) for n in range(40)]
            results = [future.result(60) for future in squares]
            assert [result["squares"] for result in results] == [[n * n, (n + 1) ** 2] for n in range(40)]
            assert [future.result(60).payload for future in uppers] == [f"WORD {n}".encode() for n in range(40)]
            # the broker hands consecutive tasks to the longest-waiting worker: all four processes served
            assert len({result["pid"] for result in results}) == 4
    finally:
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(60) == 0, (tmp_path / "pool.log").read_text()
    assert "serving 'square' x4, 'upper' x4 (process pool)" in (tmp_path / "pool.log").read_text()


def attempts(folder: Path, task: int) -> int:
    return len(list(folder.glob(f"{task}.attempt-*")))


def nap(folder: Path, task: int, first: float) -> dict[str, object]:
    return {"id": task, "dir": str(folder), "first": first, "again": 0}


def test_sigterm_mid_task_finishes_some_and_hands_back_the_rest(transport: str, brokers, tmp_path: Path) -> None:
    """Two tasks finish within the grace, two outlive it and are reissued, four wait in the queue: a second
    pool serves the rest, and every request gets one answer."""
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=FAST)
    endpoint = broker.endpoint(transport, "tcp")
    folder = tmp_path / "attempts"
    folder.mkdir()
    options = ["--service", "nap", "--concurrency", "4", "--pool", "process", "--stop-grace", "5", *HEARTBEAT]
    first = start_pool("tests.apps:faults", endpoint, transport, tmp_path / "first.log", *options)
    with Client(endpoint, transport, heartbeat_interval=0.25) as client:
        wait_for_workers(client, {"nap": 4})
        typed = TypedClient(client, "json")
        lengths = [2.0, 2.0, 600.0, 600.0, 0.0, 0.0, 0.0, 0.0]
        futures = [typed.submit("nap", nap(folder, task, length)) for task, length in enumerate(lengths)]
        wait_until(lambda: all(attempts(folder, task) == 1 for task in range(4)), "four running tasks")
        first.send_signal(signal.SIGTERM)
        assert first.wait(60) == 0, (tmp_path / "first.log").read_text()
        assert [futures[task].result(30)["attempt"] for task in (0, 1)] == [1, 1]  # finished within the grace
        assert not any(future.done() for future in futures[2:])
        assert "2 processes left tasks past the grace" in (tmp_path / "first.log").read_text()
        second = start_pool(
            "tests.apps:faults", endpoint, transport, tmp_path / "second.log", "--service", "nap", *HEARTBEAT
        )
        try:
            results = [future.result(60) for future in futures]
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(60) == 0
    assert [result["id"] for result in results] == list(range(8))
    assert [result["attempt"] for result in results] == [1, 1, 2, 2, 1, 1, 1, 1]
    assert [attempts(folder, task) for task in range(8)] == [1, 1, 2, 2, 1, 1, 1, 1]  # none ran twice unasked
    assert broker.core.counters["reissued"] >= 2


def test_thread_pool_stop_answers_a_task_within_the_grace_and_reissues_one_past_it(
    transport: str, brokers, tmp_path: Path
) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=FAST)
    endpoint = broker.endpoint(transport, "tcp")
    app = load("tests.apps:faults")
    options = SlotOptions(heartbeat_interval=0.25, liveness=4)
    pool = make_pool(app, endpoint, transport, concurrency=2, services=["nap"], options=options)
    pool.start()
    with Client(endpoint, transport, heartbeat_interval=0.25) as client:
        wait_for_workers(client, {"nap": 2})
        typed = TypedClient(client, "json")
        short, long = (typed.submit("nap", nap(tmp_path, task, length)) for task, length in ((0, 1.0), (1, 6.0)))
        wait_until(lambda: attempts(tmp_path, 0) == attempts(tmp_path, 1) == 1, "two running tasks")
        assert pool.stop(grace=2.0) == 1  # the long one was cut short
        assert short.result(30)["attempt"] == 1
        assert not long.done()
        rescue = make_pool(app, endpoint, transport, services=["nap"], options=options)
        rescue.start()
        try:
            assert long.result(30)["attempt"] == 2
        finally:
            rescue.stop(grace=5.0)


def test_a_process_that_dies_is_replaced_and_the_pool_serves_on(transport: str, brokers, tmp_path: Path) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=Settings(heartbeat_interval=0.25, liveness=4))
    endpoint = broker.endpoint(transport, "tcp")
    options = ["--service", "crash", "--service", "nap", "--concurrency", "2", "--pool", "process", *HEARTBEAT]
    pool = start_pool("tests.apps:faults", endpoint, transport, tmp_path / "pool.log", *options)
    try:
        with Client(endpoint, transport, heartbeat_interval=0.25) as client:
            wait_for_workers(client, {"crash": 2, "nap": 2})
            with pytest.raises(RequestFailed):  # each attempt ends a process, until the broker gives up
                client.request("crash", b"7", timeout=120)
            wait_until(lambda: (tmp_path / "pool.log").read_text().count("ended with status 7") >= 2, "restarts")
            wait_for_workers(client, {"crash": 2, "nap": 2})
            task = nap(tmp_path, 0, 0.0)
            assert TypedClient(client, "json").request("nap", task, timeout=60)["attempt"] == 1
    finally:
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(60) == 0, (tmp_path / "pool.log").read_text()


def test_a_slot_whose_worker_stops_serving_is_replaced(transport: str, brokers, tmp_path: Path) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=FAST)
    endpoint = broker.endpoint(transport, "tcp")
    options = ["--service", "quit", "--concurrency", "2", *HEARTBEAT]
    pool = start_pool("tests.apps:faults", endpoint, transport, tmp_path / "pool.log", *options)
    try:
        with Client(endpoint, transport, heartbeat_interval=0.25) as client:
            wait_for_workers(client, {"quit": 2})
            with pytest.raises(RequestFailed):  # every attempt ends a slot, until the broker gives up
                client.request("quit", b"now", timeout=120)
            wait_until(lambda: (tmp_path / "pool.log").read_text().count("replacing a 'quit' slot") >= 2, "replacing")
            wait_for_workers(client, {"quit": 2})
    finally:
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(60) == 0, (tmp_path / "pool.log").read_text()


def running(pid: int) -> bool:
    """True while ``pid`` is a live process (not gone, not a zombie left for init to reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_pool_processes_leave_and_say_so_when_the_parent_is_killed(transport: str, brokers, tmp_path: Path) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])  # default heartbeats: an expiry would take 7.5 s
    endpoint = broker.endpoint(transport, "tcp")
    options = ["--service", "nap", "--concurrency", "2", "--pool", "process"]
    pool = start_pool("tests.apps:faults", endpoint, transport, tmp_path / "pool.log", *options)
    with Client(endpoint, transport) as client:
        wait_for_workers(client, {"nap": 2})
        typed = TypedClient(client, "json")
        pids = {typed.submit("nap", nap(tmp_path, task, 0.5)).result(60)["pid"] for task in range(2)}
        assert len(pids) == 2
        pool.kill()
        pool.wait(60)
        wait_until(lambda: not any(running(pid) for pid in pids), "the pool's processes to leave")
        wait_until(lambda: not client.status()["workers"], "the broker to forget them")
    assert broker.core.counters["workers_expired"] == 0  # they said goodbye


@pytest.mark.parametrize("pool_kind", ["thread", "process"])
def test_app_handlers_get_the_task_context_under_generaldomo_worker(pool_kind: str, brokers, tmp_path: Path) -> None:
    """The Deadlines section's ``def fft(signal, task)`` served by ``generaldomo worker`` in either pool: the
    handler gets the task's context, with the request's deadline in it."""
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    log = tmp_path / "pool.log"
    pool = start_pool("tests.apps:deadlines", endpoint, "router", log, "--concurrency", "2", "--pool", pool_kind)
    try:
        with Client(endpoint, "router") as client:
            wait_for_workers(client, {"fft": 2})
            answer = TypedClient(client, "json").request("fft", [0.0, 1.0, 0.5], timeout=60)
            assert answer["n"] == 3
            assert answer["cancelled"] is False
            assert answer["time_left"] is not None and 0 < answer["time_left"] <= 60, answer
    finally:
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(60) == 0, log.read_text()


@pytest.mark.parametrize("pool_kind", ["thread", "process"])
def test_every_kind_of_handler_the_guide_lists_under_generaldomo_worker(
    pool_kind: str, brokers, tmp_path: Path
) -> None:
    """docs/howto/worker-apps.rst, through ``generaldomo worker`` in either pool: a generator streams partials
    and returns the final result, an ``async def`` and an async generator run on the slot's loop, a handler
    without a serializer takes and returns frames, ``Reject`` answers its status and an exception a 500."""
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    log = tmp_path / "pool.log"
    pool = start_pool("tests.apps:documented", endpoint, "router", log, "--pool", pool_kind)
    try:
        with Client(endpoint, "router") as client:
            wait_for_workers(client, {"steps": 1, "later": 1, "ticks": 1, "frames": 1, "picky": 1})
            as_json, as_msgpack = TypedClient(client, "json"), TypedClient(client, "msgpack")
            assert list(as_json.stream("steps", 3, timeout=60)) == [{"step": 0}, {"step": 1}, {"step": 2}, "done"]
            assert as_json.request("later", [1, "a"], timeout=60) == {"echo": [1, "a"]}
            assert list(as_msgpack.stream("ticks", 3, timeout=60)) == [0, 1, 2, None]
            assert client.request("frames", [b"a", b"", b"bc"], timeout=60).frames == (b"BC", b"", b"A")
            with pytest.raises(RequestFailed) as missing:
                as_json.request("picky", "missing", timeout=60)
            assert (missing.value.status, missing.value.reason) == (404, "no such item")
            with pytest.raises(RequestFailed) as broken:
                as_json.request("picky", "other", timeout=60)
            assert broken.value.status == 500 and "KeyError" in broken.value.reason
            assert as_json.request("later", "still serving", timeout=60) == {"echo": "still serving"}
    finally:
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(60) == 0, log.read_text()
