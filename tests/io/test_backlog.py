"""The backlog of replies peers have not read (generaldomo.io.hub.backlog), with trackers made by hand: marks every
CHUNK bytes, charges in the ledger until libzmq lets go, refusals only for backed-up connections."""

from __future__ import annotations

import attrs

from generaldomo.io.hub.backlog import CHUNK, DROP, MARK, TAILS, Backlog
from generaldomo.sansio.broker.accounts.ledger import Holding, Ledger

A, B = (0, b"a"), (0, b"b")


@attrs.define
class Mark:
    done: bool = False


def send(backlog: Backlog, where: tuple[int, bytes], size: int) -> Mark | None:
    """What a link does: ask how the message goes, and send it with a mark when one is due; the mark, None if
    none, or OverflowError if it is dropped."""
    step = backlog.route(where, size)
    if step == DROP:
        raise OverflowError("dropped")
    if step == MARK:
        mark = Mark()
        backlog.marked(where, size, mark)
        return mark
    return None


def admits(backlog: Backlog, where: tuple[int, bytes], size: int) -> bool:
    try:
        send(backlog, where, size)
    except OverflowError:
        return False
    return True


def test_small_replies_carry_a_mark_once_per_chunk() -> None:
    backlog = Backlog(Ledger(), None)
    per_mark = -(-CHUNK // 1000)  # replies of 1000 bytes between two marks
    marks = [send(backlog, A, 1000) for _ in range(10 * per_mark + 5)]
    assert [n for n, mark in enumerate(marks) if mark is not None] == [k * per_mark - 1 for k in range(1, 11)]
    # what the marks cover is charged; the bytes sent since the last mark are not
    assert backlog.ledger.by_kind[Holding.UNSENT] == backlog.unread(A) == 10 * per_mark * 1000


def test_a_done_mark_releases_what_it_covers_and_everything_before() -> None:
    ledger = Ledger()
    backlog = Backlog(ledger, None)
    first = send(backlog, A, CHUNK)
    second = send(backlog, A, CHUNK)
    assert first is not None and second is not None and ledger.held(A) == 2 * CHUNK and len(backlog) == 1
    first.done = True
    backlog.poll()
    assert ledger.held(A) == CHUNK
    second.done = True
    backlog.poll()
    assert ledger.held(A) == 0 and len(backlog) == 0 and len(ledger) == 0


def test_only_a_backed_up_connection_is_refused_at_its_budget() -> None:
    backlog = Backlog(Ledger(), 4 * CHUNK)
    for _ in range(4):
        send(backlog, A, CHUNK)  # nobody reads them
    assert not admits(backlog, A, 1)
    for _ in range(100):  # a reader: each mark is done soon after it went
        mark = send(backlog, B, CHUNK)
        assert mark is not None
        mark.done = True
    assert backlog.unread(B) == CHUNK  # the last one is known to be read at the next send
    assert admits(backlog, B, 8 * CHUNK) and backlog.unread(B) == 8 * CHUNK


def test_the_total_budget_refuses_backed_up_connections() -> None:
    ledger = Ledger(total=3 * CHUNK)
    backlog = Backlog(ledger, None)
    send(backlog, A, CHUNK)
    ledger.charge(B, Holding.TASK, 3 * CHUNK)  # others fill the total
    assert not admits(backlog, A, 1)
    assert admits(backlog, B, CHUNK)  # not backed up: sent to whatever the total


def test_unmarked_tails_are_kept_for_a_bounded_number_of_connections() -> None:
    backlog = Backlog(Ledger(), None)
    for n in range(TAILS + 100):
        send(backlog, (0, b"%d" % n), 10)
    assert len(backlog._tails) == TAILS
