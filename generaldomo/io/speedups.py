"""The links' optional C accelerator: whether it is in use, and why not when it is not.

``_speedups.c`` (built by ``setup.py`` when a C compiler is there) reads a batch of whole messages from a socket,
sends a message, polls the links, and packs and unpacks frames, each in one call instead of a Python call per
frame; the links (:mod:`generaldomo.io.hub.links`) and the broker loop use it when :data:`native` is not None and
keep their pure-Python path otherwise. It calls the libzmq that pyzmq loaded, found through pyzmq's own
extension module, never a second copy. Setting ``GENERALDOMO_PURE_PYTHON=1`` forces the pure-Python path (as
``AIOHTTP_NO_EXTENSIONS`` and ``MSGPACK_PUREPYTHON`` do for those projects); ``generaldomo doctor`` reports
the choice. This module decides nothing else.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import zmq

__all__ = ["PURE_PYTHON"]

PURE_PYTHON = "GENERALDOMO_PURE_PYTHON"
# pyzmq's extension modules that link libzmq, newest layout first (pyzmq >= 26 has one, older ones several)
_PYZMQ_EXTENSIONS = ("zmq.backend.cython._zmq", "zmq.backend.cython.socket")


def _pyzmq_extension() -> str:
    """The file of pyzmq's loaded extension module that holds (or links) its libzmq."""
    for name in _PYZMQ_EXTENSIONS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if module.__file__:
            return module.__file__
    raise OSError("pyzmq's Cython backend is not in use")


def _load() -> tuple[ModuleType | None, bool, str]:
    """(the bound accelerator or None, whether its SERVER functions work, a line saying which path is used)."""
    if os.environ.get(PURE_PYTHON, "") not in ("", "0"):
        return None, False, f"pure Python ({PURE_PYTHON} is set)"
    try:
        from generaldomo.io import _speedups
    except ImportError as error:
        return None, False, f"pure Python (the C accelerator is not built: {error})"
    try:
        path = _pyzmq_extension()
        draft = bool(_speedups.bind(path, zmq.ZMQError))
    except OSError as error:
        return None, False, f"pure Python (the C accelerator cannot use pyzmq's libzmq: {error})"
    return _speedups, draft, "C accelerator (generaldomo.io._speedups, on pyzmq's libzmq)"


native, native_draft, description = _load()
