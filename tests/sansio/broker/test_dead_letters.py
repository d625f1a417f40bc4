"""Dead letters in the core: the tasks that failed for good are kept per service, bounded and charged, shown by
``mmi.dead`` and the status report, replayed as new tasks (answered once, to the admin who replayed them) or
dropped; the store's invariants under any sequence of operations (a hypothesis state machine)."""

from __future__ import annotations

import json
from collections import Counter

import hypothesis.strategies as st
from core_harness import Harness, client, worker
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from generaldomo.sansio.broker.access import Credential, Role
from generaldomo.sansio.broker.accounts.dead import SERVICE_SHARE, DeadLetter, DeadLetters, letter_size
from generaldomo.sansio.broker.accounts.ledger import Holding, Ledger
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect

ADMIN = client(9)


def dead(h: Harness, rid: bytes, verb: bytes, credential: Credential | None = None, **args: object) -> tuple:
    """Send ``mmi.dead VERB {args}`` from the admin; its reply's (status, body)."""
    for to, out in h.core.receive(
        ADMIN, protocol.gdp_request(rid, b"mmi.dead", [verb, json.dumps(args).encode()]), h.now, credential
    ):
        h.inbox[to].append(out)
    replies = [(status, body) for got, status, body in h.replies_of(ADMIN) if got == rid]
    assert len(replies) == 1, replies
    return replies[0]


def fail_once(h: Harness, status: bytes = protocol.WORKER_ERROR, rid: bytes = b"r1", body: bytes = b"poison") -> bytes:
    """A request answered ``status`` by its worker; the task's id."""
    h.ready(worker(1))
    h.request(client(0), rid, body=body)
    ((task_id, _, _),) = h.tasks_of(worker(1))[-1:]
    h.feed(worker(1), protocol.gdp_ready(b"echo", (task_id, status, [b"ValueError: bad input"])))
    return task_id


def audit(h: Harness) -> None:
    """The ledger adds up to what the core holds, dead letters included."""
    held: Counter[Holding] = Counter()
    for _, kind, size in h.core.holdings():
        held[kind] += size
    assert held[Holding.DEAD] == h.core.ledger.by_kind[Holding.DEAD] == h.core.dead_letters.bytes


def test_a_failed_task_is_a_dead_letter_shown_and_replayed_as_a_new_task_answered_once() -> None:
    h = Harness()
    task_id = fail_once(h)
    assert h.replies_of(client(0)) == [(b"r1", protocol.WORKER_ERROR, (b"ValueError: bad input",))]
    report = h.core.report(h.now).broker
    assert report.dead_letters.letters == 1 and report.dead_letters.services[0].service == "echo"
    assert report.counters["dead_lettered"] == 1
    audit(h)
    status, (text,) = dead(h, b"m1", b"list", service="echo")
    listed = json.loads(text)
    assert status == protocol.OK and listed["count"] == 1 and listed["next"] is None
    (letter,) = listed["letters"]
    assert letter["id"] == task_id.hex() and letter["status"] == "500" and letter["reason"] == "ValueError: bad input"
    status, (meta, payload) = dead(h, b"m2", b"show", service="echo", id=task_id.hex())
    assert status == protocol.OK and payload == b"poison" and json.loads(meta)["attempts"] == 1
    status, (text,) = dead(h, b"m3", b"replay", service="echo", id=task_id.hex())
    replayed = json.loads(text)
    assert status == protocol.OK and replayed["replayed"] == task_id.hex() and replayed["task"] != task_id.hex()
    new_id, _, body = h.tasks_of(worker(1))[-1]
    assert new_id.hex() == replayed["task"] and body == (b"poison",)
    h.answer(worker(1), new_id, b"fixed")
    rid = bytes.fromhex(replayed["request_id"])
    assert [(s, b) for got, s, b in h.replies_of(ADMIN) if got == rid] == [(protocol.OK, (b"fixed",))]
    assert len(h.replies_of(client(0))) == 1  # the first client had its answer: never a second
    assert len(h.core.dead_letters) == 0 and h.core.report(h.now).broker.counters["dead_replayed"] == 1
    status, _ = dead(h, b"m4", b"replay", service="echo", id=task_id.hex())
    assert status == protocol.NOT_FOUND  # a letter is replayed once
    audit(h)


def test_a_task_lost_with_its_workers_max_attempts_times_is_a_dead_letter() -> None:
    h = Harness(max_attempts=2)
    h.request(client(0), b"r1")
    for n in (1, 2):
        h.ready(worker(n))
        h.feed(worker(n), protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))
    assert h.replies_of(client(0))[0][1] == protocol.UNAVAILABLE
    (letter,) = h.core.dead_letters.letters("echo", 10)[0]
    assert letter.status == protocol.UNAVAILABLE and "2 times" in letter.reason and letter.attempts == 2


def test_successes_and_client_errors_are_not_dead_letters() -> None:
    h = Harness()
    fail_once(h, protocol.OK, b"ok")
    fail_once(h, protocol.BAD_REQUEST, b"bad")
    assert len(h.core.dead_letters) == 0


def test_dead_letters_are_bounded_per_service_and_in_bytes_oldest_evicted_and_none_kept_at_zero() -> None:
    h = Harness(dead_letters=2)
    ids = [fail_once(h, rid=b"r%d" % n) for n in range(4)]
    kept, more = h.core.dead_letters.letters("echo", 10)
    assert [letter.id for letter in kept] == ids[2:] and not more
    assert h.core.report(h.now).broker.dead_letters.evicted == 2
    audit(h)
    h = Harness(dead_bytes=8000)
    fail_once(h, rid=b"other", body=b"y" * 1000)
    h.ready(worker(2), b"other")
    h.request(client(0), b"o", b"other", b"y" * 1000)
    ((task_id, _, _),) = h.tasks_of(worker(2))
    h.feed(worker(2), protocol.gdp_ready(b"other", (task_id, protocol.WORKER_ERROR, [b"no"])))
    for n in range(5):  # one service's letters hold at most half the bytes: the other's stays
        fail_once(h, rid=b"r%d" % n, body=b"x" * 1000)
    assert h.core.dead_letters.count("echo") == 2 and h.core.dead_letters.count("other") == 1
    assert h.core.dead_letters.bytes <= 8000
    audit(h)
    h = Harness(dead_letters=0)
    fail_once(h)
    assert len(h.core.dead_letters) == 0 and h.core.ledger.by_kind[Holding.DEAD] == 0


def test_dead_letters_are_forgotten_after_dead_seconds() -> None:
    h = Harness(dead_seconds=30.0)
    fail_once(h)
    h.advance(20.0)
    assert len(h.core.dead_letters) == 1
    for _ in range(10):
        h.advance(2.5)
    assert len(h.core.dead_letters) == 0 and h.core.ledger.by_kind[Holding.DEAD] == 0


def test_drop_removes_a_letter_and_pages_list_the_rest() -> None:
    h = Harness()
    ids = [fail_once(h, rid=b"r%d" % n) for n in range(3)]
    status, (text,) = dead(h, b"m1", b"list", service="echo", limit=2)
    first = json.loads(text)
    assert [letter["id"] for letter in first["letters"]] == [i.hex() for i in ids[:2]] and first["next"] == ids[1].hex()
    status, (text,) = dead(h, b"m2", b"list", service="echo", after=first["next"])
    assert [letter["id"] for letter in json.loads(text)["letters"]] == [ids[2].hex()]
    status, (text,) = dead(h, b"m3", b"drop", service="echo", id=ids[0].hex())
    assert status == protocol.OK and json.loads(text) == {"dropped": ids[0].hex()}
    status, (text,) = dead(h, b"m4", b"list")
    assert json.loads(text)["services"] == [
        {"service": "echo", "count": 2, "bytes": h.core.dead_letters.bytes, "newest_age": 0.0}
    ]
    assert dead(h, b"m5", b"drop", service="echo", id=ids[0].hex())[0] == protocol.NOT_FOUND
    audit(h)


def test_mmi_dead_needs_the_admin_role_and_good_arguments() -> None:
    h = Harness()
    fail_once(h)
    user = Credential("client-key", frozenset({Role.CLIENT}))
    admin = Credential("admin-key", frozenset({Role.ADMIN}))
    assert dead(h, b"m1", b"list", user, service="echo")[0] == protocol.FORBIDDEN
    assert dead(h, b"m2", b"list", admin, service="echo")[0] == protocol.OK
    assert dead(h, b"m3", b"bury", admin)[0] == protocol.BAD_REQUEST
    assert dead(h, b"m4", b"show", admin, service="echo")[0] == protocol.BAD_REQUEST  # no id
    assert dead(h, b"m5", b"list", admin, limit=0)[0] == protocol.BAD_REQUEST
    assert dead(h, b"m6", b"list", admin, colour="red")[0] == protocol.BAD_REQUEST
    assert dead(h, b"m7", b"show", admin, service="echo", id="zz")[0] == protocol.BAD_REQUEST


def test_a_refused_replay_leaves_the_letter() -> None:
    h = Harness()
    task_id = fail_once(h)
    h.core.stop_accepting()
    assert dead(h, b"m1", b"replay", service="echo", id=task_id.hex())[0] == protocol.UNAVAILABLE
    assert h.core.dead_letters.get("echo", task_id) is not None


class DeadLettersMachine(RuleBasedStateMachine):
    """Any sequence of letters kept, taken (replayed or dropped) and looked at: the store stays within its bounds,
    the ledger adds up to it, and a letter is taken at most once (a replay never runs one twice)."""

    PER_SERVICE, BUDGET = 3, 9000

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger()
        self.store = DeadLetters(self.PER_SERVICE, self.BUDGET, self.ledger)
        self.made = 0
        self.taken: set[bytes] = set()
        self.kept_ever: dict[bytes, str] = {}

    @rule(service=st.sampled_from(["a", "b", "c"]), size=st.integers(0, 2500), who=st.integers(0, 3))
    def keep(self, service: str, size: int, who: int) -> None:
        self.made += 1
        task_id = self.made.to_bytes(16, "big")
        body = (b"x" * size,)
        letter = DeadLetter(
            id=task_id, service=service, description=service.encode(), body=body, status=b"500", reason="r",
            when=float(self.made), attempts=1, tenant=None, priority=0, charged=(0, who),
            size=letter_size(task_id, service, service.encode(), body, "r"),
        )  # fmt: skip
        if self.store.keep(letter):
            self.kept_ever[task_id] = service

    @precondition(lambda self: bool(self.kept_ever))
    @rule(data=st.data())
    def take(self, data: st.DataObject) -> None:
        task_id = data.draw(st.sampled_from(sorted(self.kept_ever)))
        letter = self.store.take(self.kept_ever[task_id], task_id)
        if letter is not None:
            assert task_id not in self.taken, "a letter taken twice"
            self.taken.add(task_id)
        elif task_id not in self.taken:
            pass  # evicted for a bound
        assert self.store.take(self.kept_ever[task_id], task_id) is None

    @rule(age=st.integers(0, 50))
    def expire(self, age: int) -> None:
        self.store.expire(float(self.made - age))
        assert all(letter.when >= self.made - age for letter in _all(self.store))

    @invariant()
    def bounded_and_charged(self) -> None:
        store = self.store
        assert store.bytes <= self.BUDGET
        per = Counter(letter.service for letter in _all(store))
        assert all(n <= self.PER_SERVICE for n in per.values())
        assert store.bytes == sum(size for _, size in store.holdings()) == self.ledger.by_kind[Holding.DEAD]
        assert self.ledger.total == store.bytes
        assert not self.taken & {letter.id for letter in _all(store)}
        assert len(store) == sum(per.values()) and store.service_count() == len(per)
        for summary in store.services(10):
            assert summary.count == per[summary.service]
            assert summary.bytes <= self.BUDGET * SERVICE_SHARE


def _all(store: DeadLetters) -> list[DeadLetter]:
    return [letter for s in ("a", "b", "c") for letter in store.letters(s, 1000)[0]]


TestDeadLetters = DeadLettersMachine.TestCase
TestDeadLetters.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
