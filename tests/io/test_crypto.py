"""generaldomo.io.crypto names the library CURVE runs on: libsodium inside the project's libzmq here; tweetnacl
when only libzmq's own stand-in is there; none without CURVE (the last two shown by what the probe looks at)."""

from __future__ import annotations

import ctypes

import pytest
import zmq

from generaldomo import draft
from generaldomo.io import crypto


def test_the_project_s_libzmq_runs_curve_on_libsodium() -> None:
    assert crypto.curve_library().startswith("libsodium")
    assert crypto.SODIUM_ONLY == draft.SODIUM_SYMBOL and draft.SODIUM_SYMBOL in draft.MARKERS


def test_a_libzmq_without_libsodium_is_named_tweetnacl(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = ctypes.CDLL(None)  # this process's own symbols: no libsodium among them
    monkeypatch.setattr(crypto, "_loaded", lambda path: plain)
    monkeypatch.setattr(crypto, "_mapped", lambda word: [] if word == "libsodium" else ["/x/libzmq.so.5"])
    assert crypto.curve_library() == crypto.TWEETNACL


def test_a_libzmq_without_curve_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zmq, "has", lambda capability: capability != "curve")
    assert crypto.curve_library().startswith("none")
