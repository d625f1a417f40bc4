"""The IO-free layer: everything generaldomo decides, as state machines fed ``(frames, now)``.

Rules of this package: no module here imports zmq, socket, select, threading, time or
:mod:`generaldomo.io`, reads a clock, or draws randomness; time and ids are given by the caller.
``tests/package/test_layers.py`` enforces it.

Its sub-packages, each importing only those below it (the same test keeps the order): this package's own
modules (what every sub-package shares) at the bottom; :mod:`.wire` (what is on the wire) above them;
:mod:`.config` (settings and knobs) above the wire; above the configuration, :mod:`.peer` (a generaldomo peer's
side) and :mod:`.broker` (the core, over its :mod:`.broker.flow`, :mod:`.broker.services` and
:mod:`.broker.accounts`), which never import each other.
"""

__all__: list[str] = []
