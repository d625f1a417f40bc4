"""A private network namespace for a bench run that measures a peer with a fixed, all-interfaces endpoint.

The zguide's C reference broker ``mdbroker`` binds ``tcp://*:5555`` and takes no option to change it. Rather
than let it listen on the machine's interfaces, ``python -m bench --c-broker PATH`` runs itself again inside a
network namespace of its own (``unshare --net``; ``--map-root-user`` too when not root), where the only
interface is a loopback device that this module brings up: nothing outside the run can reach that port, and
the run reaches nothing outside. Linux only; ``unshare`` comes with util-linux.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
import sys

MARK = "GENERALDOMO_BENCH_NETNS"  # set in the environment of the run inside the namespace
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def inside() -> bool:
    """Whether this process runs in the namespace that :func:`enter` made."""
    return os.environ.get(MARK) == "1"


def enter(argv: list[str], module: str = "bench") -> None:
    """Run ``python -m MODULE ARGV`` again in a new network namespace, in place of this process."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SystemExit("--c-broker needs util-linux's unshare (a private network namespace for the run)")
    flags = ["--net"] if os.geteuid() == 0 else ["--net", "--map-root-user"]
    os.environ[MARK] = "1"
    sys.stdout.flush()
    os.execv(unshare, [unshare, *flags, "--", sys.executable, "-m", module, *argv])


def loopback_up() -> None:
    """Bring up the namespace's loopback device (a new namespace starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))
