"""What the broker holds for its peers, counted: the ledger, the pacing of expensive work, the kept answers.

Rules of this package: every byte held on a peer's behalf is charged to its connection (:mod:`.ledger`), the
expensive requests draw from budgets (:mod:`.pacing`), and the answers kept for re-asking are bounded and
charged (:mod:`.kept`). It is fed times and sizes; it knows nothing of tasks, services or messages, and imports
only the package root besides itself.
"""

__all__: list[str] = []
