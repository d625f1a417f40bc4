"""Configuration: the timings and limits both sides use (:mod:`.settings`) and the operator's knobs (:mod:`.knobs`).

Rules of this package: every setting has its default here, once, and every knob an operator turns is declared
here, once. It imports only the wire's field limits (:mod:`generaldomo.sansio.wire.limits`) and the package
root; it knows nothing of the broker's or the peers' state, sockets or clocks.
"""

__all__: list[str] = []
