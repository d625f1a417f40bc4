"""A service's pending tasks, shared fairly between tenants: deficit round robin, priorities that age, and
optional per-tenant limits.

This module owns the order in which a service's queued tasks are offered for dispatch. Rules:

- A *tenant* is an opaque key the core gives each task (a CURVE key, a name the client gave, or the client's
  connection); tenants with queued tasks take turns in a round-robin *rotation* (deficit round robin,
  Shreedhar and Varghese 1995): a tenant at the head of the rotation adds its *weight* (a whole number,
  default 1) to its *deficit*, and may be dispatched to while its deficit is at least 1; each dispatch costs
  1; then it goes to the back. A tenant whose queue empties leaves the rotation and its deficit is reset. So
  over any stretch in which tenants stay backlogged, their dispatches are in proportion to their weights
  (within one weight), whatever each has queued, and each dispatch costs O(1) here.
- Within a tenant, a higher ``priority`` goes first; tasks of a priority go in order. *Aging*: a task gains one
  priority level for every :data:`AGING` dispatches of its tenant since it was queued, so a low-priority task
  waits behind at most ``(levels - 1) * AGING`` dispatches of newer, higher ones; nothing starves.
- Optional per-tenant limits: ``concurrency`` (its tasks in flight) and ``rate`` (its dispatches per second,
  token bucket of ``burst``). A tenant at a limit is *held*: out of the rotation until a task of its own
  finishes, or its next token is due (:meth:`FairQueue.release_due`, :meth:`FairQueue.next_release`). Limits
  and weights are set by tenant name; the name ``*`` gives those of every tenant not named. The state of a
  tenant with nothing queued or in flight (its bucket) is kept for the latest :data:`KEEP_IDLE` such tenants
  only, so that memory stays bounded by what is queued and in flight (each charged to its connection) and a
  few idle tenants per service (charged with the service).
- A task put back at the front (a reissue, or a pair flow control holds back) goes to the head of its
  tenant's queue, and its tenant to the head of the rotation if it had left it.

The queue reads a task's ``tenant`` and ``priority`` and writes its ``order`` (the tenant's dispatch count when
it was queued, for aging), nothing else. It is told of dispatches (:meth:`FairQueue.started`) and of tasks
leaving flight (:meth:`FairQueue.stopped`) by the core. It reads no clock (times are given) and knows
nothing of workers, services' flow limits or messages. The tenants' limits as reports show them are
:func:`first_tenants`.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Hashable, Iterator, Mapping
from typing import Any, Final

from generaldomo.sansio.broker.flow.bounds import within
from generaldomo.sansio.broker.flow.bucket import TokenBucket
from generaldomo.sansio.checked import check_fields, checked, checked_record
from generaldomo.sansio.queues import Queue
from generaldomo.sansio.wire.limits import BURST, CONCURRENCY, RATE, TENANT, TENANTS, WEIGHT

__all__ = [
    "AGING",
    "DEFAULT",
    "KEEP_IDLE",
    "MAX_NAMED",
    "MAX_WEIGHT",
    "FairQueue",
    "TenantLimits",
    "Tenants",
    "merge_tenants",
    "tenants_of",
]

AGING = 8  # dispatches of its tenant after which a waiting task gains one priority level
MAX_WEIGHT = WEIGHT.high
MAX_NAMED = TENANTS.high  # tenants one service may have limits for
KEEP_IDLE: Final = 16  # tenants with nothing queued or in flight whose state is kept, latest first (service's charge)
DEFAULT = "*"  # the name whose limits apply to every tenant not named
REPORTED_TENANTS = 32  # tenants a service report lists, busiest first; and tenant limits its flow report lists


def _weight(name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WEIGHT:
        raise ValueError(f"a tenant's weight is a whole number from 1 to {MAX_WEIGHT}")
    return value


_WHO = "a tenant's "  # a bad limit's message says whose it is


@dataclasses.dataclass(frozen=True, slots=True)
class TenantLimits:
    """One tenant's share and limits within a service: ``weight`` (its quantum in the rotation), ``rate``
    (dispatches per second), ``burst`` (back to back under the rate; default 1) and ``concurrency`` (in
    flight); None: no limit. Raises ValueError on a bad value."""

    weight: int = checked(_weight, default=1)
    rate: float | None = checked(within(RATE, whole=False, who=_WHO), default=None)
    burst: int | None = checked(within(BURST, whole=True, who=_WHO), default=None)
    concurrency: int | None = checked(within(CONCURRENCY, whole=True, who=_WHO), default=None)

    @classmethod
    def of(cls, value: object) -> TenantLimits:
        """Limits from their JSON form: an object with any of the four keys."""
        if isinstance(value, TenantLimits):
            return value
        if not isinstance(value, dict):
            raise ValueError('a tenant\'s limits are a JSON object like {"weight": 2, "concurrency": 4}')
        known = {field.name: field for field in dataclasses.fields(cls)}
        unknown = set(value) - set(known)
        if unknown:
            raise ValueError(f"unknown tenant limits {sorted(unknown)}; known: {', '.join(known)}")
        return checked_record(cls, value)  # (converted before the record is made)

    def __post_init__(self) -> None:
        check_fields(self)


Tenants = Mapping[str, TenantLimits]


def tenants_of(value: object) -> dict[str, TenantLimits] | None:
    """Per-tenant limits from their JSON form (an object of tenant name -> limits), None for none."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError('tenants must be a JSON object like {"alice": {"weight": 2}}, or null')
    if len(value) > MAX_NAMED:
        raise ValueError(f"limits for at most {MAX_NAMED} tenants per service")
    named = {}
    for name, limits in value.items():
        if not isinstance(name, str) or not TENANT.fits(name.encode()) or not name.isprintable():
            raise ValueError(f"a tenant name is {TENANT.bounds} of printable text, not {name!r:.70}")
        named[name] = TenantLimits.of(limits)
    return named or None


def merge_tenants(current: Tenants | None, changes: object) -> dict[str, TenantLimits] | None:
    """``current`` with ``changes`` (tenant name -> limits, or null to forget a tenant's) applied; a null
    ``changes`` forgets them all."""
    if changes is None:
        return None
    if not isinstance(changes, Mapping):
        raise ValueError('tenants must be a JSON object like {"alice": {"weight": 2}, "bob": null}, or null')
    merged: dict[str, object] = dict(current or {})
    for name, limits in changes.items():
        if limits is None:
            merged.pop(name, None)
        else:
            merged[name] = limits
    return tenants_of(merged)


class _Tenant:
    """One tenant's queued tasks (a FIFO queue per priority level) and the state of its share and limits."""

    __slots__ = (
        "bucket",
        "deficit",
        "dispatched",
        "held",
        "in_flight",
        "key",
        "levels",
        "limits",
        "queued",
    )

    def __init__(self, key: Hashable, limits: TenantLimits) -> None:
        self.key = key
        self.limits = limits
        self.levels: dict[int, Queue[Any]] = {}
        self.queued = 0
        self.deficit = 0.0
        self.in_flight = 0
        self.dispatched = 0  # dispatches since it appeared: the clock that tasks age by
        self.held = False
        self.bucket: TokenBucket | None = None  # of its rate limit, made at its first dispatch under one (None: full)

    def best(self) -> Queue[Any]:
        """The level whose head goes next (it has tasks queued): the highest priority after aging, the older on
        a tie. Levels are kept once made (at most one per priority), empty or not."""
        levels = self.levels
        if len(levels) == 1:
            for queue in levels.values():
                return queue
        now = self.dispatched
        best, best_key = None, None
        for priority, queue in levels.items():
            if not queue:
                continue
            head = queue[0]
            key = (priority + (now - head.order) // AGING, -head.order)
            if best_key is None or key > best_key:
                best, best_key = queue, key
        assert best is not None
        return best

    def tasks(self) -> Iterator[Any]:
        for priority in sorted(self.levels, reverse=True):
            yield from self.levels[priority]

    def refill(self, now: float) -> None:
        rate = self.limits.rate
        if rate is not None:
            if self.bucket is None:
                self.bucket = TokenBucket()
            self.bucket.refill(now, rate, float(self.limits.burst or 1))

    def take(self) -> None:
        """Take a token of its rate (after a refill)."""
        if self.bucket is not None:
            self.bucket.take()

    def blocked(self) -> bool:
        """True while a limit holds it (tokens as last refilled)."""
        limits = self.limits
        if limits.concurrency is not None and self.in_flight >= limits.concurrency:
            return True
        return limits.rate is not None and self.bucket is not None and not self.bucket.has_token

    def next_token(self) -> float | None:
        """When the rate next allows a dispatch, if the rate is what holds it (after a refill)."""
        rate, bucket = self.limits.rate, self.bucket
        if rate is None or bucket is None or bucket.has_token:
            return None
        return bucket.due(rate)


class FairQueue:
    """A service's pending tasks by tenant; deque-like for the service and its resolvers (``append``,
    ``appendleft``, ``popleft``, ``remove``, ``remove_all``, ``[0]``, ``len``, iteration over the tasks that
    may go now). ``len`` and truth count every queued task, held tenants' too; :attr:`ready` says whether one
    may be dispatched now."""

    def __init__(self) -> None:
        self._tenants: dict[Hashable, _Tenant] = {}
        self._idle: dict[Hashable, None] = {}  # tenants with nothing queued or in flight, oldest first
        self._rotation: Queue[_Tenant] = Queue(tracked=True)
        self._waking: list[tuple[float, int, _Tenant]] = []  # rate-held tenants by when their token is due
        self._order = 0
        self._len = 0
        self._named: Tenants = {}
        self._default = TenantLimits()

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[Any]:
        """The tasks that may be dispatched now, tenant by tenant in rotation order."""
        for tenant in list(self._rotation):
            yield from tenant.tasks()

    def __getitem__(self, index: int) -> Any:
        """The head (``[0]``: the task :meth:`popleft` would take)."""
        if index != 0:
            raise IndexError("a fair queue gives its head only")
        if not self._rotation:
            raise IndexError("no task may be dispatched now")
        return self._rotation[0].best()[0]

    def __repr__(self) -> str:
        return f"FairQueue({len(self._tenants)} tenants, {self._len} tasks)"

    @property
    def rate_held(self) -> bool:
        """True when a tenant may be held by its rate (:meth:`release_due` has something to look at)."""
        return bool(self._waking)

    @property
    def ready(self) -> bool:
        """True when a task may be dispatched now (some tenant with queued tasks is not held)."""
        return bool(self._rotation)

    @property
    def slots(self) -> int:
        """Entries the level queues hold, live and marked (see :mod:`generaldomo.sansio.queues`)."""
        return sum(queue.slots for tenant in self._tenants.values() for queue in tenant.levels.values())

    # ---------------------------------------------------------------------------------------- configuration

    def configure(self, named: Tenants | None) -> None:
        """Weights and limits by tenant name (:data:`DEFAULT`: every other tenant's); tenants already here get
        theirs at once (a held tenant is looked at again when a task of its own finishes, or at
        :meth:`release_due`)."""
        self._named = dict(named or {})
        self._default = self._named.get(DEFAULT, TenantLimits())
        for tenant in self._tenants.values():
            tenant.limits = self._limits(tenant.key)
            if tenant.held and not tenant.blocked():
                self._unhold(tenant)

    def _limits(self, key: Hashable) -> TenantLimits:
        named = self._named.get(key) if isinstance(key, str) else None
        return self._default if named is None else named

    def _tenant(self, key: Hashable) -> _Tenant:
        tenant = self._tenants.get(key)
        if tenant is None:
            tenant = self._tenants[key] = _Tenant(key, self._limits(key))
        elif key in self._idle:
            del self._idle[key]
        return tenant

    # ---------------------------------------------------------------------------------------- queueing

    # append, popleft, started and stopped are on the broker's hot path: the common case (a tenant known, one
    # level, nothing held) calls none of this class's helpers

    def append(self, task: Any) -> None:
        """Queue ``task`` behind its tenant's tasks of its priority."""
        tenant = self._tenants.get(task.tenant)
        if tenant is None:
            tenant = self._tenant(task.tenant)
        elif self._idle and tenant.key in self._idle:  # (not dict.pop: a method call under the compiled core)
            del self._idle[tenant.key]
        task.order = tenant.dispatched
        level = tenant.levels.get(task.priority)
        if level is None:
            level = self._level(tenant, task.priority)
        level.append(task)
        tenant.queued += 1
        self._len += 1
        if tenant.queued == 1 and not tenant.held:
            self._rotation.append(tenant)

    def appendleft(self, task: Any) -> None:
        """Queue ``task`` (reissued, or put back) at the head of its tenant's queue, keeping its age."""
        tenant = self._tenant(task.tenant)
        self._level(tenant, task.priority).appendleft(task)
        self._queued(tenant, front=True)

    def _level(self, tenant: _Tenant, priority: int) -> Queue[Any]:
        level = tenant.levels.get(priority)
        if level is None:
            level = tenant.levels[priority] = Queue()
        return level

    def _queued(self, tenant: _Tenant, front: bool) -> None:
        tenant.queued += 1
        self._len += 1
        if tenant.queued == 1 and not tenant.held:
            if front:
                self._rotation.appendleft(tenant)
            else:
                self._rotation.append(tenant)

    def popleft(self) -> Any:
        """Take the next task to dispatch (IndexError when none may go): the rotation's head tenant's best."""
        rotation = self._rotation
        # a tenant at the head tops up; one still in debt is passed over (its debt is finite)
        while (tenant := rotation.head()) is not None:
            if tenant.deficit < 1.0:
                tenant.deficit += tenant.limits.weight
                if tenant.deficit < 1.0:  # it took more than its share out of turn (a resolver's choice)
                    rotation.popleft()
                    rotation.append(tenant)
                    continue
            levels = tenant.levels
            if len(levels) == 1:  # (best and _take, inline: the hot path)
                for level in levels.values():
                    task = level.popleft()
            else:
                task = tenant.best().popleft()
            self._dequeued(tenant)
            return task
        raise IndexError("no task may be dispatched now")

    def _take(self, tenant: _Tenant, level: Queue[Any]) -> Any:
        task = level.popleft()
        self._dequeued(tenant)
        return task

    def _dequeued(self, tenant: _Tenant) -> None:
        tenant.queued -= 1
        self._len -= 1
        if not tenant.queued:
            rotation = self._rotation
            if rotation.head() is tenant:
                rotation.popleft()
            else:
                rotation.remove(tenant)
            tenant.deficit = 0.0
            if not tenant.in_flight:
                self._maybe_idle(tenant)

    def remove(self, task: Any) -> None:
        """Take ``task``, which is queued, out (a cancel, a deadline, or a resolver's own choice); nothing
        happens when its tenant has nothing queued at its priority."""
        tenant = self._tenants.get(task.tenant)
        level = None if tenant is None else tenant.levels.get(task.priority)
        if tenant is None or level is None or not level:
            return
        level.remove(task)
        self._dequeued(tenant)

    def remove_all(self, doomed: set[Any]) -> None:
        """Take every task of ``doomed`` (all queued) out."""
        for task in doomed:
            self.remove(task)

    # ---------------------------------------------------------------------------------------- dispatch

    def started(self, task: Any, now: float) -> None:
        """``task``, taken from this queue, was dispatched at ``now``: charge its tenant; hold it at a limit."""
        tenant = self._tenants.get(task.tenant)
        if tenant is None:
            tenant = self._tenant(task.tenant)
        elif self._idle and tenant.key in self._idle:  # (not dict.pop: a method call under the compiled core)
            del self._idle[tenant.key]
        tenant.in_flight += 1
        tenant.dispatched += 1
        if tenant.limits.rate is not None:
            tenant.refill(now)
            tenant.take()
        rotation = self._rotation
        if tenant.queued:
            tenant.deficit -= 1.0
            if tenant.deficit < 1.0 and rotation and rotation[0] is tenant:  # its turn is over
                rotation.popleft()
                rotation.append(tenant)
        limits = tenant.limits
        if (limits.concurrency is not None or limits.rate is not None) and tenant.blocked():
            self._hold(tenant)

    def stopped(self, task: Any) -> None:
        """``task`` left flight (answered, failed, lost with its worker, sent back by it)."""
        tenant = self._tenants.get(task.tenant)
        if tenant is None:
            return
        tenant.in_flight -= 1
        if tenant.held and not tenant.blocked():
            self._unhold(tenant)
        elif not tenant.in_flight and not tenant.queued:
            self._maybe_idle(tenant)

    def release_due(self, now: float) -> None:
        """Put back in the rotation the tenants whose rate allows a dispatch again at ``now``."""
        waking = self._waking
        while waking and waking[0][0] <= now:
            tenant = heapq.heappop(waking)[2]
            if tenant.held and self._tenants.get(tenant.key) is tenant:
                tenant.refill(now)
                if not tenant.blocked():
                    self._unhold(tenant)

    def next_release(self) -> float | None:
        """When :meth:`release_due` next has a tenant to put back, if one is held by its rate."""
        waking = self._waking
        while waking and not (waking[0][2].held and self._tenants.get(waking[0][2].key) is waking[0][2]):
            heapq.heappop(waking)
        return waking[0][0] if waking else None

    def _hold(self, tenant: _Tenant) -> None:
        tenant.held = True
        self._rotation.remove(tenant)
        tenant.deficit = 0.0
        when = tenant.next_token()
        if when is not None:
            self._order += 1
            heapq.heappush(self._waking, (when, self._order, tenant))

    def _unhold(self, tenant: _Tenant) -> None:
        tenant.held = False
        if tenant.queued:
            self._rotation.append(tenant)
        else:
            self._maybe_idle(tenant)

    def _maybe_idle(self, tenant: _Tenant) -> None:
        """Count ``tenant`` among the idle ones if it is; forget the oldest idle one beyond :data:`KEEP_IDLE`."""
        if tenant.queued or tenant.in_flight or tenant.held:
            return
        idle = self._idle
        idle[tenant.key] = None
        if len(idle) > KEEP_IDLE:
            oldest = next(iter(idle))
            del idle[oldest], self._tenants[oldest]

    # ---------------------------------------------------------------------------------------- reports

    def busiest(self, count: int) -> list[tuple[Hashable, TenantLimits, int, int, bool, int]]:
        """``(key, limits, queued, in flight, held, dispatched)`` of the ``count`` tenants with the most queued and
        in flight (of those with any)."""
        busy = [t for t in self._tenants.values() if t.key not in self._idle]
        top = heapq.nlargest(count, busy, key=lambda t: t.queued + t.in_flight)
        return [(t.key, t.limits, t.queued, t.in_flight, t.held, t.dispatched) for t in top]

    @property
    def busy_tenants(self) -> int:
        """Tenants with something queued or in flight."""
        return len(self._tenants) - len(self._idle)


def first_tenants(tenants: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The limits of "*" and of the first other tenants set, :data:`REPORTED_TENANTS` in all, in JSON form."""
    shown = dict.fromkeys(
        itertools.islice(itertools.chain(("*",) if "*" in tenants else (), tenants), REPORTED_TENANTS + 1)
    )
    return {name: dataclasses.asdict(tenants[name]) for name in itertools.islice(shown, REPORTED_TENANTS)}


TENANTS_SCHEMA: Final = {
    "type": ["object", "null"],
    "additionalProperties": {
        "type": "object",
        "required": ["weight", "rate", "burst", "concurrency"],
        "properties": {
            "weight": {"type": "integer", "minimum": 1, "maximum": 1000},
            "rate": {"type": ["number", "null"], "exclusiveMinimum": 0},
            "burst": {"type": ["integer", "null"], "minimum": 1},
            "concurrency": {"type": ["integer", "null"], "minimum": 1},
        },
    },
}  # the JSON schema of the tenants' limits as reports show them (first_tenants)
