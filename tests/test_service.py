"""The default service (SMO): FIFO pairing of waiting workers and pending tasks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from generaldomo.sansio.service import Service


class Item:
    def __init__(self, name: str) -> None:
        self.description = name.encode()


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


class PendingQueue(RuleBasedStateMachine):
    """Service's pending queue against a plain list, under pushes (back and front), drops anywhere, pairings
    and discards: the same tasks in the same order, and never more than twice as many entries as tasks (+64)."""

    def __init__(self) -> None:
        super().__init__()
        self.service = Service("s")
        self.model: list[Item] = []
        self.names = iter(range(10**9))

    @rule(front=st.booleans())
    def push(self, front: bool) -> None:
        task = item(f"t{next(self.names)}")
        self.service.push(task, front=front)
        if front:
            self.model.insert(0, task)
        else:
            self.model.append(task)

    @precondition(lambda self: self.model)
    @rule(where=st.floats(0, 1))
    def drop(self, where: float) -> None:
        task = self.model.pop(min(len(self.model) - 1, int(where * len(self.model))))
        self.service.drop(task)

    @rule()
    def pair(self) -> None:
        worker = item("w")
        self.service.wait(worker)
        pair = self.service.next_pair()
        if self.model:
            assert pair == (worker, self.model.pop(0))
        else:
            assert pair is None
            self.service.unwait(worker)

    @precondition(lambda self: self.model)
    @rule()
    def put_back(self) -> None:  # what flow control does with a pair it holds back
        worker = item("w")
        self.service.wait(worker)
        worker, task = self.service.next_pair()  # type: ignore[misc]
        self.service.put_back(worker, task)
        self.service.unwait(worker)

    @rule(share=st.floats(0, 1))
    def discard(self, share: float) -> None:
        doomed = set(self.model[: int(share * len(self.model))])
        self.service.discard(doomed)
        self.model = [t for t in self.model if t not in doomed]

    @invariant()
    def same_tasks_in_order(self) -> None:
        assert list(self.service.live()) == self.model
        assert self.service.queued == len(self.model)
        assert len(self.service.pending) <= 2 * len(self.model) + 64


TestPendingQueue = PendingQueue.TestCase
TestPendingQueue.settings = settings(max_examples=200, stateful_step_count=80, deadline=None)


def test_cancelling_a_long_queue_out_of_order_leaves_no_marks_behind() -> None:
    # Each drop from the middle costs O(1) (a mark; the queue is rebuilt when marks outnumber tasks): the
    # queue holds at most twice its tasks whatever the order; then the survivors pair in their order.
    service = Service("s")
    tasks = [item(f"t{n}") for n in range(20_000)]
    for task in tasks:
        service.push(task)
    keep = tasks[::100]
    for task in reversed(tasks):
        if task not in keep:
            service.drop(task)
            assert len(service.pending) <= 2 * service.queued + 64
    assert service.queued == len(keep) and list(service.live()) == keep
    for task in keep:
        service.wait(item("w"))
        assert service.next_pair()[1] is task  # type: ignore[index]
    assert not service.pending
