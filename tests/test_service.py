"""The default service (SMO): FIFO pairing of waiting workers and pending tasks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

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
