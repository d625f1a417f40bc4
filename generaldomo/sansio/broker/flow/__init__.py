"""Flow control for one service: rate, concurrency, bytes in flight, fair shares, adaptive cap and backoff.

Rules of this package: it owns the arithmetic of admission (:mod:`.flow`), the order of a service's pending
tasks between tenants (:mod:`.fair`), the adaptive concurrency cap (:mod:`.adaptive`) and the rate adapted to
429 answers (:mod:`.backoff`). It is fed times and sizes; it knows nothing of workers, peers, messages or the
core, and imports only the wire's field limits and the package root.
"""

__all__: list[str] = []
