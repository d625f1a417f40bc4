"""``generaldomo status`` for people: fits its width, one number format per column, workers' host and pid."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator

import pytest
import zmq
from core_harness import Harness, client, worker
from hypothesis import example, given, settings
from hypothesis import strategies as st

from generaldomo import Broker, Client, Worker
from generaldomo.cli.columns import Format, width_of
from generaldomo.cli.status_view import COUNTS, FLOW, WIDTH, WORKERS, render
from generaldomo.sansio.broker.report import StatusReport
from generaldomo.sansio.wire import codec, protocol

PATTERNS = {
    Format.TEXT: r".*",
    Format.ID: r"\d+",
    Format.COUNT: r"\d{1,3}(,\d{3})*",
    Format.RATE: r"\d{1,3}(,\d{3})*\.\d\d",
    Format.MS: r"\d{1,3}(,\d{3})*\.\d",
    Format.SECONDS: r"\d{1,3}(,\d{3})*\.\d",
}
FORMATS = {column.header: column.format for column in [*COUNTS, *FLOW, *WORKERS] if column.header != "service"}


def by_column(line: str) -> list[str]:
    """The characters of a line, one per terminal column ("" for the second column of a wide one)."""
    cells: list[str] = []
    for char in line:
        taken = width_of(char)
        if taken == 0 and cells:
            cells[-1] += char
        else:
            cells += [char] + [""] * (taken - 1)
    return cells


def tables(text: str) -> list[list[dict[str, str]]]:
    """Each table of a rendered report as rows of {header: cell}, sliced where its rule line has gaps."""
    found = []
    for block in text.split("\n\n"):
        lines = [by_column(line) for line in block.splitlines()]
        if len(lines) < 2 or not re.fullmatch(r"-[- ]*…?", "".join(lines[1])):
            continue
        spans = [m.span() for m in re.finditer(r"-+", "".join(lines[1]))]
        cells = [["".join(line[a:b]).strip() for a, b in spans] for line in lines]
        found.append([dict(zip(cells[0], row, strict=True)) for row in cells[2:]])
    return found


def assert_formatted(text: str, width: int | None) -> list[list[dict[str, str]]]:
    """Every line fits, nothing unprintable, and every cell of a known column is in that column's format."""
    for line in text.splitlines():
        assert width is None or width_of(line) <= width, line
        assert line.isprintable(), line
    found = tables(text)
    for rows in found:
        for row in rows:
            for header, value in row.items():
                format = FORMATS.get(header)
                if format is not None and not value.endswith("…"):
                    assert value == "-" or re.fullmatch(PATTERNS[format], value), (header, value)
    return found


def busy_harness(names: list[str]) -> Harness:
    h = Harness()
    h.core.set_endpoints([("router", "tcp://127.0.0.1:5555"), ("server", "ipc:///tmp/" + "long/" * 20 + "x")])
    for n, name in enumerate(names):
        h.feed(worker(n), protocol.gdp_ready(name.encode(), info=protocol.worker_info(f"node-{n}", 10_000 + n)))
        for r in range(n * 400):
            h.request(client(n), b"%d-%d" % (n, r), name.encode(), b"x" * 10)
    h.feed(worker(99), [b"", b"MDPW01", b"\x01", b"mdp"])
    return h


@given(
    st.lists(st.text(min_size=1, max_size=60), min_size=1, max_size=4, unique=True),
    st.none() | st.integers(40, 240),
)
@settings(deadline=None, max_examples=50)
@example(["\u0300"], None)  # a name that is one combining mark: shown on a dotted circle, the columns kept
def test_any_report_fits_its_width_and_keeps_its_formats(names: list[str], width: int | None) -> None:
    report = busy_harness(names).core.report(12_345.6)
    text = render(report, width)
    found = assert_formatted(text, width)
    assert len(found) in (2, 3) and len(found[-1]) == len(report.workers)
    if width is None or width >= WIDTH:  # narrower, the columns on the right may be cut off
        assert {row["pid"] for row in found[-1]} == {str(w.pid) if w.pid else "-" for w in report.workers}


def test_one_services_table_when_it_fits_else_two() -> None:
    report = busy_harness(["echo"]).core.report(1.0)
    wide = render(report, None)
    services, _ = tables(wide)  # one services table with every column, then the workers
    assert {"done", "burst", "serve p99 ms"} <= set(services[0])
    narrow = render(report)
    assert len(tables(narrow)) == 3 and max(map(len, narrow.splitlines())) <= WIDTH


class RawWorker:
    """A worker made of one socket and frames typed out: an older generaldomo worker, or an MDP one."""

    def __init__(self, context: zmq.Context, endpoint: str, transport: str) -> None:
        self.server = transport == "server"
        self.socket = context.socket(zmq.CLIENT if self.server else zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)

    def send(self, frames: list[bytes]) -> None:
        if self.server:
            self.socket.send(codec.encode(frames))
        else:
            self.socket.send_multipart(frames)


@pytest.fixture
def context() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def wait_for_workers(client_: Client, count: int) -> StatusReport:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        report = StatusReport.from_dict(client_.status(timeout=10))
        if len(report.workers) >= count:
            return report
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} workers registered within 30 s")


def status_cli(endpoint: str, transport: str, *flags: str) -> str:
    shown = subprocess.run(
        [sys.executable, "-m", "generaldomo", "status", endpoint, "--transport", transport, *flags],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_a_real_brokers_status_fits_and_shows_hosts_and_pids(
    transport: str,
    brokers: Callable[..., Broker],
    workers: Callable[..., Worker],
    context: zmq.Context,
) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport, "echo")
    workers(endpoint, transport, "a-service-with-a-rather-long-name-that-will-not-fit-in-its-column")
    old = RawWorker(context, endpoint, transport)
    old.send([b"GDPW01", b"\x01", b"old"])  # a READY as generaldomo workers sent it before peer info
    mdp = RawWorker(context, endpoint, transport)
    mdp.send([b"MDPW02", b"\x01", b"mdp"])
    with Client(endpoint, transport) as client_:
        for n in range(30):
            assert client_.request("echo", b"%d" % n, timeout=10).payload == b"%d" % n
        client_.flow("echo", rate=1000, burst=5)
        report = wait_for_workers(client_, 4)
    said = {w.service: (w.host, w.pid) for w in report.workers}
    assert said["echo"] == (socket.gethostname(), os.getpid())
    assert said["old"] == (None, None) and said["mdp"] == (None, None)

    text = status_cli(endpoint, transport)  # not a terminal: 100 columns
    counts, flow, shown = assert_formatted(text, WIDTH)
    echo = next(row for row in counts if row["service"] == "echo")
    assert echo["done"] == "30" and echo["workers"] == "1"
    limits = next(row for row in flow if row["service"] == "echo")
    assert (limits["limit/s"], limits["burst"], limits["max conc"]) == ("1,000.00", "5", "-")
    rows = {row["service"].rstrip("…"): row for row in shown}
    assert rows["echo"]["pid"] == str(os.getpid()) and rows["echo"]["tasks"] == "30"
    assert socket.gethostname().startswith(rows["echo"]["host"].rstrip("…"))
    assert (rows["old"]["host"], rows["old"]["pid"]) == ("-", "-")
    assert (rows["mdp"]["host"], rows["mdp"]["pid"], rows["mdp"]["dialect"]) == ("-", "-", "MDP/0.2")

    assert_formatted(status_cli(endpoint, transport, "--columns", "60"), 60)
    wide = status_cli(endpoint, transport, "--wide")
    assert_formatted(wide, None)
    assert len(tables(wide)) == 2 and "a-service-with-a-rather-long-name-that-will-not-fit-in-its-column" in wide


def run_on_a_terminal(command: list[str], columns: int) -> str:
    """What ``command`` prints to a pseudo-terminal ``columns`` wide (COLUMNS unset, so the size is asked)."""
    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(command, stdout=terminal, stderr=subprocess.PIPE, env=env)
    os.close(terminal)
    out = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                break
            if not chunk:
                break
            out += chunk
        assert process.wait(30) == 0, process.stderr.read() if process.stderr else ""
    finally:
        os.close(main)
        if process.stderr:
            process.stderr.close()
    return out.decode().replace("\r\n", "\n")


def test_on_a_terminal_the_status_fits_its_width(
    brokers: Callable[..., Broker], workers: Callable[..., Worker]
) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router", "a-service-with-a-name-long-enough-to-need-cutting-at-seventy-columns")
    with Client(endpoint, "router") as client_:
        wait_for_workers(client_, 1)
    command = [sys.executable, "-m", "generaldomo", "status", endpoint]
    narrow = run_on_a_terminal(command, 70)
    assert "service" in narrow and max(map(width_of, narrow.splitlines())) <= 70
    assert_formatted(narrow, 70)
    wide = run_on_a_terminal(command, 250)
    assert max(map(width_of, wide.splitlines())) > WIDTH  # one services table, wider than the default
    assert len(tables(wide)) == 2 and "a-service-with-a-name-long-enough-to-need-cutting-at-seventy-columns" in wide


def test_per_service_flow_lines_start_lines_and_an_unknown_service_is_answered_with_the_nearest(
    brokers: Callable[..., Broker], workers: Callable[..., Worker]
) -> None:
    """``generaldomo status`` puts each service's byte-limit line on a line of its own (not joined to the table
    by a "?"); ``--service`` with a name the broker does not know exits 1 naming the nearest, printing no table."""
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router", "echo")
    with Client(endpoint, "router") as client_:
        wait_for_workers(client_, 1)
        client_.flow("echo", bytes_in_flight=1_000_000, timeout=10)
    for flags in ([], ["--service", "echo"], ["--wide"]):
        text = status_cli(endpoint, "router", *flags)
        assert "echo: bytes in flight 0/1000000" in text.splitlines(), text
        assert "?" not in text, text
    typo = subprocess.run(
        [sys.executable, "-m", "generaldomo", "status", endpoint, "--service", "ehco"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert typo.returncode == 1, typo.stderr
    assert typo.stdout == ""
    assert "has no service 'ehco' (its services: echo); did you mean 'echo'?" in typo.stderr, typo.stderr
