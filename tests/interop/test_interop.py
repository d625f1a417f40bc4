"""Majordomo interop: C MDP/0.1 and MDP/0.2 peers, written from the RFCs on plain libzmq, against the broker.

The peers (``tests/interop/*.c``) are compiled once per session and run as real processes. The C clients are
strict: they verify every reply themselves (header, command, service, echoed body, partials before the final,
no duplicates) and exit non-zero on anything a classic C Majordomo client would abort on, so most tests assert
their exit status and one-line summary. Brokers are the ``generaldomo broker`` command, or an embedded
:class:`~generaldomo.Broker` where a test reads its counters.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import zmq
from transports import TRANSPORTS
from waiting import eventually

from generaldomo import Broker, Client
from generaldomo.sansio.broker.core import Settings

# the tests marked `pure` run again in env pure, on the pure-Python path: those that carry each dialect's messages
# (batches, partials) through each link; the others test the broker's rules, which that path does not change

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0  # seconds: the bound on every wait; generous for a loaded 2-core machine
REPLY_TIMEOUT_MS = str(int(WAIT * 1000))


@pytest.fixture(scope="session")
def peers(c_peers: dict[str, Path]) -> dict[str, Path]:
    """The C peers, compiled once per test session (tests/conftest.py)."""
    return c_peers


class Process:
    """A process whose stdout and stderr go to files, so that nothing blocks on a full pipe."""

    def __init__(self, args: list[str], log_dir: Path, name: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.stdout = log_dir / f"{name}.out"
        self.stderr = log_dir / f"{name}.err"
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.popen = subprocess.Popen(args, stdout=out, stderr=err, cwd=ROOT, env=env)

    def output(self) -> str:
        return self.stdout.read_text(errors="replace")

    def describe(self) -> str:
        status = self.popen.poll()
        return (
            f"--- {self.name} (exit {status}) stdout:\n{self.output()}"
            f"--- {self.name} stderr:\n{self.stderr.read_text(errors='replace')}"
        )

    def wait_for(self, text: str, count: int = 1, timeout: float = WAIT) -> None:
        """Wait until ``text`` occurs ``count`` times in stdout; fail if the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        while self.output().count(text) < count:
            assert self.popen.poll() is None, f"{self.name} exited waiting for {text!r}\n{self.describe()}"
            assert time.monotonic() < deadline, f"{self.name} did not print {text!r}\n{self.describe()}"
            time.sleep(0.02)

    def finish(self, timeout: float = WAIT) -> str:
        """Wait for a successful exit; return stdout."""
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name} did not exit within {timeout} s\n{self.describe()}")
        assert self.popen.returncode == 0, self.describe()
        return self.output()


class Processes:
    """Starts the C peers and broker processes of one test; kills whatever is left at teardown."""

    def __init__(self, peers: dict[str, Path], log_dir: Path) -> None:
        self.peers = peers
        self.log_dir = log_dir
        self.started: list[Process] = []

    def peer(self, program: str, endpoint: str, *args: str, name: str | None = None) -> Process:
        """Start a C peer (``mdp01_client``, ``mdp02_worker``...) connected to ``endpoint``."""
        name = name or f"{program}-{len(self.started)}"
        return self._start([str(self.peers[program]), *args, endpoint], name)

    def client(self, program: str, endpoint: str, *args: str) -> str:
        """Run a C client to its end; assert it succeeded; return its stdout."""
        return self.peer(program, endpoint, "--timeout-ms", REPLY_TIMEOUT_MS, *args).finish(2 * WAIT)

    def broker(self, *options: str, name: str = "broker") -> tuple[Process, dict[str, str]]:
        """Start ``generaldomo broker`` with a router and a server link; return it and ``{transport: endpoint}``."""
        links = ("--router", "tcp://127.0.0.1:*", "--server", "tcp://127.0.0.1:*")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        process = self._start([sys.executable, "-m", "generaldomo", "broker", *links, *options], name, env)
        process.wait_for("generaldomo broker: server ")
        lines = [line.split() for line in process.output().splitlines() if line.startswith("generaldomo broker:")]
        return process, {words[2]: words[3] for words in lines}

    def wait_registered(self, endpoint: str, service: str = "echo") -> None:
        """Ask the broker's mmi.service (with the C client) until ``service`` has a worker."""
        deadline = time.monotonic() + WAIT
        while "200" not in self.client("mdp01_client", endpoint, "--mmi", service):
            assert time.monotonic() < deadline, f"no worker registered for {service!r}\n{self.describe()}"
            time.sleep(0.05)

    def describe(self) -> str:
        return "\n".join(process.describe() for process in self.started)

    def _start(self, args: list[str], name: str, env: dict[str, str] | None = None) -> Process:
        process = Process(args, self.log_dir, name, env)
        self.started.append(process)
        return process

    def close(self) -> None:
        """Kill what still runs; print every process's output (pytest shows it if the test failed)."""
        for process in self.started:
            if process.popen.poll() is None:
                process.popen.kill()
        for process in self.started:
            process.popen.wait(WAIT)
        print(self.describe())


@pytest.fixture
def procs(peers: dict[str, Path], tmp_path: Path) -> Iterator[Processes]:
    processes = Processes(peers, tmp_path)
    yield processes
    processes.close()


@pytest.fixture
def embedded_broker() -> Iterator[Broker]:
    """A broker in this process with a router and a server link; heartbeats every second (so must its workers)."""
    broker = Broker(settings=Settings(heartbeat_interval=1.0))
    broker.add_link("router", ["tcp://127.0.0.1:*"])
    broker.add_link("server", ["tcp://127.0.0.1:*"])
    broker.start()
    yield broker
    broker.stop()


def wait_until(condition, what: str) -> None:
    eventually(condition, WAIT, what)


# ------------------------------------------------------------------------------------------ C peers only


@pytest.mark.pure
@pytest.mark.parametrize("mode", ["sync", "pipeline"])
def test_mdp01_client_and_worker(procs: Processes, mode: str) -> None:
    _, links = procs.broker()
    worker = procs.peer("mdp01_worker", links["router"], "--tag", "w:", "--count", "50")
    pipeline = ["--pipeline"] if mode == "pipeline" else []
    out = procs.client("mdp01_client", links["router"], "--requests", "50", "--tag", "w:", *pipeline)
    assert out == "ok 50 replies (w:=50)\n"
    assert worker.finish() == "served 50 requests\n"  # exactly one task per request reached the worker


@pytest.mark.pure
@pytest.mark.parametrize("mode", ["sync", "pipeline"])
def test_mdp02_client_and_worker_with_partial_replies(procs: Processes, mode: str) -> None:
    _, links = procs.broker()
    worker = procs.peer("mdp02_worker", links["router"], "--tag", "w:", "--partials", "3", "--count", "20")
    pipeline = ["--pipeline"] if mode == "pipeline" else []
    out = procs.client("mdp02_client", links["router"], "--requests", "20", "--tag", "w:", "--partials", "3", *pipeline)
    assert out == "ok 20 replies, 60 partials (w:=20)\n"  # the client checked 3 partials, in order, before each FINAL
    assert worker.finish() == "served 20 requests\n"


def test_mdp02_partial_replies_arrive_while_the_worker_still_works(procs: Processes) -> None:
    _, links = procs.broker()
    procs.peer("mdp02_worker", links["router"], "--partials", "2", "--delay-ms", "6000")  # a PARTIAL every 2 s
    client = procs.peer("mdp02_client", links["router"], "--partials", "2", "--timeout-ms", REPLY_TIMEOUT_MS, "-v")
    client.wait_for("partial req-0#1")
    assert "final" not in client.output()  # the worker is still working on the rest, for 4 s more
    assert client.finish() == "partial req-0#1\npartial req-0#2\nfinal req-0\nok 1 replies, 2 partials\n"


@pytest.mark.parametrize(("client", "worker"), [("mdp01_client", "mdp02_worker"), ("mdp02_client", "mdp01_worker")])
def test_mdp01_and_mdp02_peers_mix(procs: Processes, client: str, worker: str) -> None:
    """Each peer gets answers in its own dialect; an MDP/0.1 client gets only the final reply, not the partials."""
    _, links = procs.broker()
    partials = ["--partials", "2"] if worker == "mdp02_worker" else []
    procs.peer(worker, links["router"], "--tag", "w:", *partials)
    out = procs.client(
        client, links["router"], "--requests", "20", "--pipeline", "--tag", "w:", "--check-no-extra", "300"
    )
    assert out == "ok 20 replies (w:=20)\n"


@pytest.mark.pure
def test_mdp01_client_pipelines_1000_requests_to_two_workers(procs: Processes, embedded_broker: Broker) -> None:
    endpoint = embedded_broker.endpoint("router", "tcp")
    for tag in ("A:", "B:"):
        procs.peer("mdp01_worker", endpoint, "--tag", tag, "--heartbeat-ms", "1000")
    wait_until(lambda: len(embedded_broker.core.workers) == 2, "both workers registered")
    out = procs.client(
        "mdp01_client", endpoint, "--requests", "1000", "--pipeline", "--tag", "A:", "--tag", "B:",
        "--check-no-extra", "500",
    )  # fmt: skip
    served = dict(item.split("=") for item in out.removeprefix("ok 1000 replies (").removesuffix(")\n").split(", "))
    assert set(served) == {"A:", "B:"} and all(int(n) > 0 for n in served.values()), out
    assert sum(int(n) for n in served.values()) == 1000
    assert embedded_broker.core.counters["completed"] == 1000


@pytest.mark.parametrize("version", ["01", "02"])
def test_task_of_a_killed_worker_goes_to_another_worker_and_is_answered_once(procs: Processes, version: str) -> None:
    _, links = procs.broker("--heartbeat", "1")
    endpoint = links["router"]
    slow = ["--heartbeat-ms", "1000", "--delay-ms", "600000", "-v"]
    doomed = procs.peer(f"mdp{version}_worker", endpoint, "--tag", "doomed:", *slow, name="doomed")
    procs.wait_registered(endpoint)
    client = procs.peer(
        f"mdp{version}_client", endpoint, "--tag", "rescuer:", "--timeout-ms", REPLY_TIMEOUT_MS,
        "--check-no-extra", "2000", name="client",
    )  # fmt: skip
    doomed.wait_for("request req-0")
    rescuer = procs.peer(f"mdp{version}_worker", endpoint, "--tag", "rescuer:", "--heartbeat-ms", "1000", "-v")
    doomed.popen.send_signal(signal.SIGKILL)
    assert client.finish(2 * WAIT) == "ok 1 replies (rescuer:=1)\n"
    rescuer.wait_for("replied")
    assert rescuer.output() == "request req-0\nreplied\n"


def test_late_reply_of_a_worker_presumed_dead_is_dropped(procs: Processes, embedded_broker: Broker) -> None:
    """A worker frozen (SIGSTOP) past its expiry has its task reissued; its reply after SIGCONT never arrives."""
    endpoint = embedded_broker.endpoint("router", "tcp")
    hb = ["--heartbeat-ms", "1000", "-v"]
    frozen = procs.peer("mdp01_worker", endpoint, "--tag", "frozen:", "--delay-ms", "4000", *hb, name="frozen")
    wait_until(lambda: len(embedded_broker.core.workers) == 1, "the first worker registered")
    client = procs.peer(
        "mdp01_client", endpoint, "--tag", "rescuer:", "--timeout-ms", REPLY_TIMEOUT_MS, "--check-no-extra", "5000",
        name="client",
    )  # fmt: skip
    frozen.wait_for("request req-0")
    frozen.popen.send_signal(signal.SIGSTOP)
    try:
        rescuer = procs.peer("mdp01_worker", endpoint, "--tag", "rescuer:", *hb, name="rescuer")
        rescuer.wait_for("replied")
    finally:
        frozen.popen.send_signal(signal.SIGCONT)
    frozen.wait_for("replied")
    wait_until(lambda: embedded_broker.core.counters["duplicates_dropped"] >= 1, "the late reply was dropped")
    assert client.finish(2 * WAIT) == "ok 1 replies (rescuer:=1)\n"
    assert embedded_broker.core.counters["reissued"] == 1
    assert embedded_broker.core.counters["duplicates_dropped"] == 1


@pytest.mark.parametrize("client", ["mdp01_client", "mdp02_client"])
def test_mmi_service(procs: Processes, client: str) -> None:
    _, links = procs.broker()
    endpoint = links["router"]
    procs.peer("mdp01_worker", endpoint)
    procs.wait_registered(endpoint)
    assert procs.client(client, endpoint, "--mmi", "echo") == "mmi.service echo 200\n"
    assert procs.client(client, endpoint, "--mmi", "nobody") == "mmi.service nobody 404\n"


@pytest.mark.parametrize("version", ["01", "02"])
def test_c_worker_reconnects_to_a_restarted_broker(procs: Processes, version: str) -> None:
    first, links = procs.broker("--heartbeat", "0.5", name="first-broker")
    endpoint = links["router"]
    worker = procs.peer(
        f"mdp{version}_worker", endpoint, "--heartbeat-ms", "500", "--reconnect-ms", "500", "--tag", "w:"
    )
    assert procs.client(f"mdp{version}_client", endpoint, "--tag", "w:") == "ok 1 replies (w:=1)\n"
    first.popen.kill()  # no DISCONNECT: the worker must notice the silence
    first.popen.wait(WAIT)
    procs.broker("--heartbeat", "0.5", "--router", endpoint, name="second-broker")
    out = procs.client(f"mdp{version}_client", endpoint, "--tag", "w:", "--requests", "5")
    assert out == "ok 5 replies (w:=5)\n"
    assert "reconnecting" in worker.stderr.read_text()


# ------------------------------------------------------------------------------------------ C and Python peers


@pytest.mark.needs_draft
def test_c_worker_serves_python_clients_over_the_server_link(procs: Processes) -> None:
    _, links = procs.broker()
    procs.peer("mdp01_worker", links["router"], "--tag", "c:")
    with Client(links["server"], "server") as client, ThreadPoolExecutor(4) as pool:

        def ask(thread: int) -> list[bytes]:
            return [client.request("echo", b"t%d-%d" % (thread, n), timeout=WAIT).payload for n in range(25)]

        answers = list(pool.map(ask, range(4)))
        several = client.request("echo", [b"a", b"", b"c" * 1000], timeout=WAIT).frames  # the tag goes on the first
    assert answers == [[b"c:t%d-%d" % (thread, n) for n in range(25)] for thread in range(4)]
    assert list(several) == [b"c:a", b"", b"c" * 1000]


@pytest.mark.pure
def test_c_worker_serves_python_clients_over_both_links_at_once(procs: Processes) -> None:
    _, links = procs.broker()
    procs.peer("mdp02_worker", links["router"], "--tag", "c:", "--partials", "1")
    with Client(links["server"], "server") as server, Client(links["router"], "router") as router:
        futures = [(client.submit("echo", b"%d" % n), n) for n in range(50) for client in (server, router)]
        assert [future.result(WAIT).payload for future, _ in futures] == [b"c:%d" % n for _, n in futures]


@pytest.mark.pure
@pytest.mark.parametrize("mode", ["sync", "pipeline"])
def test_python_worker_serves_c_clients(procs: Processes, workers, transport: str, mode: str) -> None:
    _, links = procs.broker()
    workers(links[transport], transport, "echo", lambda payload: b"py:" + payload)
    pipeline = ["--pipeline"] if mode == "pipeline" else []
    for client in ("mdp01_client", "mdp02_client"):
        out = procs.client(
            client, links["router"], "--requests", "100", "--tag", "py:", "--check-no-extra", "300", *pipeline
        )
        assert out == "ok 100 replies (py:=100)\n"


# ------------------------------------------------------------------------------------------ the peers are strict

GOOD_REPLY = {
    "mdp01_client": [b"", b"MDPC01", b"echo", b"req-0"],
    "mdp02_client": [b"MDPC02", b"\x03", b"echo", b"req-0"],
}
BAD_REPLIES = {
    "mdp01_client": {
        "header": [b"", b"MDPC02", b"echo", b"req-0"],
        "delimiter": [b"MDPC01", b"echo", b"req-0"],
        "service": [b"", b"MDPC01", b"other", b"req-0"],
        "body": [b"", b"MDPC01", b"echo", b"req-1"],
        "frames": [b"", b"MDPC01", b"echo", b"req-0", b""],
    },
    "mdp02_client": {
        "header": [b"MDPC01", b"\x03", b"echo", b"req-0"],
        "command": [b"MDPC02", b"\x04", b"echo", b"req-0"],
        "service": [b"MDPC02", b"\x03", b"other", b"req-0"],
        "body": [b"MDPC02", b"\x03", b"echo", b"w:req-0"],
        "partial": [b"MDPC02", b"\x02", b"echo", b"req-0#1"],
    },
}


@pytest.mark.parametrize(
    ("client", "fault"), [(client, fault) for client, faults in BAD_REPLIES.items() for fault in [*faults, "extra"]]
)
def test_c_clients_abort_on_a_bad_reply(procs: Processes, client: str, fault: str) -> None:
    """Against a fake broker: a reply a strict Majordomo client must refuse makes it exit 1 and say why."""
    with zmq.Context() as context, context.socket(zmq.ROUTER) as router:
        router.linger = 0
        router.bind("tcp://127.0.0.1:*")
        peer = procs.peer(
            client, router.last_endpoint.decode(), "--timeout-ms", REPLY_TIMEOUT_MS, "--check-no-extra", "60000"
        )
        assert router.poll(WAIT * 1000), "the client sent no request"
        identity, *request = router.recv_multipart()
        assert request[-2:] == [b"echo", b"req-0"]
        replies = [GOOD_REPLY[client]] * 2 if fault == "extra" else [BAD_REPLIES[client][fault]]
        for reply in replies:
            router.send_multipart([identity, *reply])
        peer.popen.wait(WAIT)
    assert peer.popen.returncode == 1, peer.describe()
    assert f"{client}: " in peer.stderr.read_text()


@pytest.mark.parametrize("client", ["mdp01_client", "mdp02_client"])
def test_c_clients_time_out(procs: Processes, client: str) -> None:
    _, links = procs.broker()
    peer = procs.peer(client, links["router"], "--service", "nobody", "--timeout-ms", "300")
    peer.popen.wait(WAIT)
    assert peer.popen.returncode == 3 and "timeout" in peer.stderr.read_text(), peer.describe()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_c_mdp02_worker_streams_partials_to_a_python_client(procs: Processes, transport: str) -> None:
    _, links = procs.broker()
    procs.peer("mdp02_worker", links["router"], "--tag", "c:", "--partials", "3", "--delay-ms", "300")
    with Client(links[transport], transport) as client:
        parts = list(client.stream("echo", b"s", timeout=WAIT))
    assert [p.partial for p in parts] == [True, True, True, False]
    assert [p.payload for p in parts] == [b"c:s#1", b"c:s#2", b"c:s#3", b"c:s"]


def test_c_mdp02_worker_with_delimiter_serves_majortomo_clients(procs: Processes) -> None:
    """``--delimiter``: the C worker speaks majortomo's MDP/0.2 (an empty frame first), so that bench part
    ``openloop`` can give majortomo's broker the same C workers as ours; majortomo's client gets the echo."""
    import threading

    import majortomo
    from majortomo.broker import Broker as MajortomoBroker

    broker = MajortomoBroker(bind="tcp://127.0.0.1:*")
    broker.bind()
    endpoint = broker._socket.getsockopt(zmq.LAST_ENDPOINT).decode()
    broker.bind = lambda: None  # type: ignore[method-assign]  # run() would bind again
    broker._bind_url = endpoint  # what its close() lets go of
    thread = threading.Thread(target=broker.run, daemon=True)
    thread.start()
    try:
        procs.peer("mdp02_worker", endpoint, "--delimiter", "--tag", "c:", "--partials", "1")
        with majortomo.Client(endpoint) as client:
            client.send(b"echo", b"m")
            assert client.recv_all_as_list(timeout=WAIT) == [b"c:m#1", b"c:m"]
    finally:
        broker.stop()
        thread.join(WAIT)
