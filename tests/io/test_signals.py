"""The one way the command and the worker pool stop on a signal: an event set instead of the process ending, and
one that a signal handler sets without a lock (a ``threading.Event`` set by a handler that lands while the main
thread is inside that event's own ``wait`` waits for its lock for ever)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from generaldomo.cli import options
from generaldomo.io.signals import STOP_SIGNALS, SignalEvent, stop_on_signals


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)


@pytest.mark.parametrize("number", STOP_SIGNALS, ids=lambda number: number.name)
def test_a_stop_signal_sets_the_event_and_the_process_goes_on(handlers: None, number: signal.Signals) -> None:
    stop = stop_on_signals()
    assert not stop.is_set()
    os.kill(os.getpid(), number)
    assert stop.wait(30)


def test_only_the_signals_named_are_taken(handlers: None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a pool's child does: the parent decides on Ctrl-C
    stop = stop_on_signals([signal.SIGTERM])
    os.kill(os.getpid(), signal.SIGINT)
    assert not stop.wait(0.5) and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.wait(30)


def test_the_command_line_uses_the_same_function() -> None:
    assert options.stop_on_signals is stop_on_signals


# The main thread in the event's own methods again and again, as a serving loop's wait is, when SIGTERM comes.
BUSY_MAIN = """\
import signal
from generaldomo.io.signals import stop_on_signals
stop = stop_on_signals([signal.SIGTERM])
print("ready", flush=True)
while not stop.wait(0):
    stop.is_set()
"""


def _stops() -> bool:
    """Whether a process whose main thread spins in its stop event's ``wait`` ends within 30 s of SIGTERM (with a
    ``threading.Event`` set by the handler, about two runs in three never end)."""
    process = subprocess.Popen([sys.executable, "-c", BUSY_MAIN], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(30) == 0
        except subprocess.TimeoutExpired:
            return False
    finally:
        process.kill()
        process.wait(30)


def test_a_signal_that_lands_inside_the_event_s_own_wait_stops_the_process() -> None:
    assert all(_stops() for _ in range(5))


def test_the_signal_event_wakes_every_waiter_and_clears() -> None:
    event, woken = SignalEvent(), []
    waiters = [threading.Thread(target=lambda: woken.append(event.wait(60))) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    assert not event.wait(0.05) and not event.is_set()
    event.set()
    for waiter in waiters:
        waiter.join(60)
    assert woken == [True, True, True] and event.wait(0) and event.is_set()
    event.clear()
    assert not event.is_set() and not event.wait(0.05)
