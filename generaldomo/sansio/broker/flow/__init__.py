"""Flow control for one service: rate, concurrency, bytes in flight, fair shares, adaptive cap and backoff.

Rules of this package: it owns the flow limits' declarations and the arithmetic of admission (:mod:`.flow`;
what a declaration holds and what is made from them: :mod:`.declaration`), the order of a service's pending
tasks between tenants (:mod:`.fair`), the adaptive concurrency cap (:mod:`.adaptive`), the rate adapted to 429
answers (:mod:`.backoff`), and the token bucket (:mod:`.bucket`) and the check of a limit's value
(:mod:`.bounds`) that a service's and a tenant's limits share. It is fed times and sizes; it knows nothing of
workers, peers, messages or the core, and imports only the wire's field limits, the knobs (a limit's CLI flag
and help) and the package root.
"""

__all__: list[str] = []
