"""The one way the command and the worker pool stop on a signal: an event set instead of the process ending."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from generaldomo.cli import options
from generaldomo.io.signals import STOP_SIGNALS, stop_on_signals


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
