"""The broker's counters: one typed record of what happened, by the names the status report and metrics show.

This module owns the names and the meaning of the broker's event counters. The core (and its parts) count by attribute
(``counters.completed += 1``), so that a misspelt counter is a type error, not a new name; the status report
(:meth:`Counters.reported`), the metrics and the logs read the same record. The ledger's refusals are counted by the
name :meth:`generaldomo.sansio.broker.accounts.ledger.Refusal.counter` gives (a field here); the IO layer's links count
their own drops under names of their own, which :meth:`Counters.add` keeps beside the fields. It knows nothing of
sockets, clocks or frames.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

__all__ = ["Counters"]


@dataclasses.dataclass(slots=True)
class Counters:
    """What the broker counted since it started; each field is reported under its name once it is not zero."""

    # requests
    requests: int = 0  # requests heard, management requests included
    retries_absorbed: int = 0  # requests whose id was live or answered: not new tasks
    request_id_conflicts: int = 0  # requests under a live id with another description or payload
    rejected: int = 0  # requests answered with an error at once
    over_budget: int = 0  # of them: refused by a queue budget or the ledger (429)
    unknown_service: int = 0  # of them: for a service nobody serves (404)
    too_large: int = 0  # messages over max_message
    forbidden: int = 0  # messages a key's roles do not allow
    malformed: int = 0  # messages that do not parse
    cancelled: int = 0  # tasks their client cancelled
    reasked: int = 0  # request ids clients asked about again
    echoes_refused: int = 0  # unknown ids a HEARTBEAT answer left out
    answers_resent: int = 0  # kept answers sent again
    resends_refused: int = 0  # kept answers not sent again: the connection's budget
    resends_paced: int = 0  # kept answers not sent again: the connection's work per second
    moves_refused: int = 0  # answers that could not follow their client to a new connection
    paced: int = 0  # expensive management requests that waited their turn
    paced_refused: int = 0  # expensive management requests refused beyond their line
    trace_dropped: int = 0  # trace contexts dropped from requests: malformed (the requests go on)
    # tasks
    completed: int = 0  # tasks answered
    failed: int = 0  # of them: lost with their worker max_attempts times
    expired: int = 0  # of them: answered 504 (queue timeout or deadline)
    past_deadline: int = 0  # tasks whose deadline passed
    deadline_unreachable: int = 0  # tasks answered 504 at once: less time left than the estimated service time
    delayed: int = 0  # tasks held off their queue until a time (a request's not_before)
    abandoned: int = 0  # tasks answered 503 when the broker stopped
    reissued: int = 0  # tasks queued again after their worker left
    throttled: int = 0  # tasks a worker answered 429 ("slow down")
    retried: int = 0  # answers a retry policy retried (the task held for a backoff, then queued again)
    retries_exhausted: int = 0  # answers a policy would retry, given to the client: the task had all its retries
    retries_past_deadline: int = 0  # answers a policy would retry, answered 504: the backoff ends past the deadline
    client_gone_dropped: int = 0  # queued tasks of clients gone silent
    duplicates_dropped: int = 0  # results for tasks that are not live
    results_refused: int = 0  # results from peers that do not hold the task
    # dead letters
    dead_lettered: int = 0  # tasks that failed for good, kept in their service's dead letters
    dead_replayed: int = 0  # dead letters replayed as new tasks
    dead_dropped: int = 0  # dead letters an admin dropped
    # workers
    workers_registered: int = 0
    workers_refused: int = 0
    workers_expired: int = 0  # silent past their expiry
    workers_malformed: int = 0  # dropped for a malformed message
    workers_replaced: int = 0  # registrations retired: their worker registered again from a new connection
    # hand-over
    workers_resumed: int = 0  # workers that came back with a task of an earlier instance
    tasks_resumed: int = 0  # tasks a resumed worker runs
    handed_over: int = 0  # results of tasks an earlier instance dispatched, taken over
    handovers_refused: int = 0  # such results for another request under the same id
    # durable queues (a state directory's journal)
    tasks_restored: int = 0  # requests queued again from the journal at start
    answers_restored: int = 0  # answers kept again from the journal at start
    journal_damaged: int = 0  # journal entries skipped at start: damaged, or cut short by a crash
    # forgotten
    services_forgotten: int = 0
    flows_forgotten: int = 0
    # the ledger's refusals (Refusal.counter)
    refused_connection_bytes: int = 0
    refused_total_bytes: int = 0
    refused_connection_tasks: int = 0
    refused_connection_workers: int = 0
    refused_connection_services: int = 0
    refused_connection_flows: int = 0
    refused_connection_clients: int = 0
    refused_connection_kept: int = 0
    refused_connection_unsent: int = 0
    # the barrier's (generaldomo.sansio.barrier.INTERNAL_ERRORS)
    internal_errors: int = 0
    # the IO layer's counts, by the names it gives
    others: Counter[str] = dataclasses.field(default_factory=Counter)

    def add(self, name: str, n: int = 1) -> None:
        """Count ``n`` more under ``name``: a field's, or else one of the IO layer's names.

        Args:
            name: the counter's name.
            n: how many.
        """
        if name in _FIELDS:
            setattr(self, name, getattr(self, name) + n)
        else:
            self.others[name] += n

    def __getitem__(self, name: str) -> int:
        """The count under ``name`` (0: none yet), as the status report names it."""
        return int(getattr(self, name)) if name in _FIELDS else self.others[name]

    def reported(self) -> dict[str, int]:
        """The counters that are not zero, by name, as the status report and the metrics show them."""
        counts = {name: n for name in _FIELDS if (n := getattr(self, name))}
        counts.update((name, n) for name, n in self.others.items() if n)
        return dict(sorted(counts.items()))


_FIELDS = frozenset(field.name for field in dataclasses.fields(Counters) if field.name != "others")
