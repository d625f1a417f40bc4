"""The default service (SMO): FIFO pairing of waiting workers and pending tasks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.queues import COMPACT_AFTER


class Item:
    def __init__(self, name: str) -> None:
        self.description = name.encode()
        self.tenant, self.priority, self.order = None, 0, 0  # one tenant, one priority: first come, first served


def item(name: str) -> Item:
    return Item(name)


@given(st.lists(st.sampled_from(["worker", "task"]), max_size=40))
def test_pairs_oldest_worker_with_oldest_task(arrivals: list[str]) -> None:
    service = Service("s")
    workers, tasks, pairs = [], [], []
    for n, kind in enumerate(arrivals):
        if kind == "worker":
            w = item(f"w{n}")
            workers.append(w)
            service.join(w)
            service.wait(w)
        else:
            t = item(f"t{n}")
            tasks.append(t)
            service.push(t)
        while (pair := service.next_pair()) is not None:
            pairs.append(pair)
    count = min(len(workers), len(tasks))
    assert [p[0] for p in pairs] == workers[:count] and [p[1] for p in pairs] == tasks[:count]
    assert len(service.waiting) == len(workers) - count and len(service.pending) == len(tasks) - count


def test_reissued_task_goes_first_and_leavers_stop_waiting() -> None:
    service = Service("s")
    a, b, w1, w2 = item("a"), item("b"), item("w1"), item("w2")
    service.push(a)
    service.push(b, front=True)
    for w in (w1, w2):
        service.join(w)
        service.wait(w)
    service.leave(w1)
    service.leave(w1)  # twice is harmless
    assert service.next_pair() == (w2, b)
    service.drop(a)
    service.drop(a)
    assert service.next_pair() is None and service.workers == {w2}


class Queues(RuleBasedStateMachine):
    """A service's two queues against plain lists, under pushes (back and front), drops and unwaits anywhere,
    pairings, put-backs and discards: the same items in the same order, and never more than twice as many
    entries as items (plus the compaction threshold)."""

    def __init__(self) -> None:
        super().__init__()
        self.service = Service("s")
        self.tasks: list[Item] = []
        self.workers: list[Item] = []
        self.names = iter(range(10**9))

    @rule(front=st.booleans())
    def push(self, front: bool) -> None:
        task = item(f"t{next(self.names)}")
        self.service.push(task, front=front)
        if front:
            self.tasks.insert(0, task)
        else:
            self.tasks.append(task)

    @rule()
    def wait(self) -> None:
        worker = item(f"w{next(self.names)}")
        self.service.join(worker)
        self.service.wait(worker)
        self.workers.append(worker)

    @precondition(lambda self: self.tasks)
    @rule(where=st.floats(0, 1))
    def drop(self, where: float) -> None:
        self.service.drop(self.tasks.pop(min(len(self.tasks) - 1, int(where * len(self.tasks)))))

    @precondition(lambda self: self.workers)
    @rule(where=st.floats(0, 1), twice=st.booleans())
    def leave(self, where: float, twice: bool) -> None:
        worker = self.workers.pop(min(len(self.workers) - 1, int(where * len(self.workers))))
        self.service.leave(worker)
        if twice:  # leaving when not waiting is a no-op
            self.service.leave(worker)

    @rule()
    def pair(self) -> None:
        pair = self.service.next_pair()
        if self.tasks and self.workers:
            assert pair == (self.workers.pop(0), self.tasks.pop(0))
        else:
            assert pair is None

    @precondition(lambda self: self.tasks and self.workers)
    @rule()
    def put_back(self) -> None:  # what flow control does with a pair it holds back
        worker, task = self.service.next_pair()  # type: ignore[misc]
        self.service.put_back(worker, task)

    @rule(share=st.floats(0, 1))
    def discard(self, share: float) -> None:
        doomed = set(self.tasks[: int(share * len(self.tasks))])
        self.service.discard(doomed)
        self.tasks = [t for t in self.tasks if t not in doomed]

    @invariant()
    def same_items_in_order(self) -> None:
        assert list(self.service.pending) == self.tasks and len(self.service.pending) == len(self.tasks)
        assert list(self.service.waiting) == self.workers and len(self.service.waiting) == len(self.workers)
        assert bool(self.service.pending) == bool(self.tasks)
        if self.tasks:
            assert self.service.pending[0] is self.tasks[0]
        if self.workers:
            assert self.service.waiting[0] is self.workers[0] and self.service.waiting[-1] is self.workers[-1]
        for queue, live in ((self.service.pending, self.tasks), (self.service.waiting, self.workers)):
            assert queue.slots <= 2 * len(live) + COMPACT_AFTER


TestQueues = Queues.TestCase
TestQueues.settings = settings(max_examples=200, stateful_step_count=80, deadline=None)


def test_cancelling_a_long_queue_out_of_order_leaves_few_marks_behind() -> None:
    # Each removal from the middle costs O(1) (a mark; the queue is rebuilt when marks outnumber items): the
    # queue holds at most about twice its items whatever the order; then the survivors pair in their order.
    service = Service("s")
    tasks = [item(f"t{n}") for n in range(20_000)]
    for task in tasks:
        service.push(task)
    keep = tasks[::100]
    for task in reversed(tasks):
        if task not in keep:
            service.drop(task)
            assert service.pending.slots <= 2 * len(service.pending) + COMPACT_AFTER
    assert list(service.pending) == keep
    for task in keep:
        service.wait(item("w"))
        assert service.next_pair()[1] is task  # type: ignore[index]
    assert not service.pending and service.pending.slots == 0
