"""What the broker holds for its peers, counted: the ledger, the pacing of expensive work, the kept answers, the
dead letters.

Rules of this package: every byte held on a peer's behalf is charged to its connection (:mod:`.ledger`), the
expensive requests draw from budgets (:mod:`.pacing`), and the answers kept for re-asking and the dead letters
(requests that failed for good, by service name) are bounded and charged (:mod:`.kept`, :mod:`.dead`). It is fed
times and sizes; it knows nothing of tasks, services' queues or messages, and imports only the package root
besides itself.
"""

__all__: list[str] = []
