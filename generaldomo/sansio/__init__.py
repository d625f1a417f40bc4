"""The IO-free layer: everything generaldomo decides, as state machines fed ``(frames, now)``.

Rules of this package: no module here imports zmq, socket, select, threading, time or
:mod:`generaldomo.io`, reads a clock, or draws randomness; time and ids are given by the caller.
``tests/package/test_layers.py`` enforces it.
"""
