"""Which cryptography library libzmq's CURVE runs on, for ``generaldomo doctor``.

libzmq does CURVE either with libsodium (optimised: the project's draft build links 1.0.20 in, and PyPI's pyzmq
wheels ship it as a shared library) or with the tweetnacl reference code it bundles, about ten times slower for
large messages (bench/README.md, "What CURVE costs"). libzmq does not say which, so this looks: first for
libsodium's ``crypto_box_easy_afternm`` (which libzmq calls only on libsodium; its tweetnacl has a
``sodium_init`` of its own) inside the library that holds libzmq (pyzmq's extension, for a static libzmq, or a
shared ``libzmq``), then for a shared ``libsodium`` mapped into this process. It only reads; it loads nothing
new (``RTLD_NOLOAD``).
"""

from __future__ import annotations

import ctypes
import os

import zmq

from generaldomo.io import files
from generaldomo.io.speedups import _pyzmq_extension

__all__ = ["MAPS", "SODIUM_ONLY", "TWEETNACL", "curve_library"]

MAPS = files.FileKind("memory map", 16 * 1024 * 1024)  # /proc/self/maps: a line per mapping
SODIUM_ONLY = "crypto_box_easy_afternm"
TWEETNACL = "tweetnacl (libzmq's bundled reference code: large CURVE messages are about 10x slower)"


def _mapped(word: str) -> list[str]:
    """Paths of the shared objects mapped into this process whose file name contains ``word``."""
    try:
        maps = files.read("/proc/self/maps", MAPS).decode("utf-8", "replace").splitlines()
        paths = {line.split(None, 5)[-1].strip() for line in maps if line.count(" ") >= 5}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/") and word in os.path.basename(p))


def _loaded(path: str) -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None


def _version(lib: ctypes.CDLL) -> str:
    if not hasattr(lib, "sodium_version_string"):
        return ""
    lib.sodium_version_string.restype = ctypes.c_char_p
    return f" {lib.sodium_version_string().decode()}"


def curve_library() -> str:
    """A line naming CURVE's cryptography library: libsodium (where it is), tweetnacl, or no CURVE at all."""
    if not zmq.has("curve"):
        return "none (this libzmq was built without CURVE)"
    try:
        holders = [_pyzmq_extension()]
    except OSError:
        holders = []
    for path in [*holders, *_mapped("libzmq")]:
        lib = _loaded(path)
        if lib is not None and hasattr(lib, SODIUM_ONLY):
            return f"libsodium{_version(lib)} (linked into {os.path.basename(path)})"
    for path in _mapped("libsodium"):
        lib = _loaded(path)
        return f"libsodium{_version(lib) if lib is not None else ''} ({path})"
    return TWEETNACL
