"""Nothing held without a charge, by construction: every container of the broker core and of a service, and
every part of them (an object of generaldomo's own), is declared in ``core.HOLDINGS`` with what charges or
bounds it. This test enumerates them on a core that has seen traffic and fails for one that is not declared, so
that a new structure that grows on a peer's behalf is threaded through the ledger when it is added. It reads the
objects' attributes as Python keeps them (``__dict__``, ``__slots__``), which a compiled class does not show: it
runs on the pure-Python path (env pure; the compiled core is built from the same sources)."""

from __future__ import annotations

from collections.abc import Collection, Iterator

import pytest
from core_harness import Harness, client, worker

from generaldomo import compiled
from generaldomo.sansio.broker.core import HOLDINGS, PARTS

pytestmark = pytest.mark.skipif(
    compiled.in_use(), reason="reads the attributes as Python keeps them, which a compiled class does not show"
)


def _held(obj: object, prefix: str = "", shared: Collection[object] = ()) -> Iterator[str]:
    """The names of ``obj``'s attributes that are containers or parts of generaldomo's own, but those ``shared``
    (the same objects as the core's own)."""
    names = vars(obj) if hasattr(obj, "__dict__") else {k: getattr(obj, k) for k in getattr(obj, "__slots__", ())}
    for name, value in names.items():
        if isinstance(value, str | bytes | int | float | bool) or value is None or callable(value):
            continue
        if any(value is other for other in shared):
            continue
        if hasattr(value, "__len__") or type(value).__module__.startswith("generaldomo."):
            yield prefix + name


def test_every_container_of_the_core_and_of_a_service_is_declared_with_what_charges_it() -> None:
    h = Harness()
    h.ready(worker(1))
    h.request(client(0), b"r0")
    h.request(client(1), b"r1", b"other")
    (service, *_) = list(h.core.resolver.services())
    found = set(_held(h.core)) | set(_held(service, "service."))
    shared = [h.core, *vars(h.core).values()]  # what a part shares with the core (the ledger, a part, the core)
    for part in PARTS:
        found |= set(_held(getattr(h.core, part), part + ".", shared))
    undeclared = found - set(HOLDINGS)
    assert not undeclared, f"not charged to the ledger nor otherwise bounded (declare in HOLDINGS): {undeclared}"
    assert not set(HOLDINGS) - found, f"declared but gone: {set(HOLDINGS) - found}"


def test_a_container_added_without_a_declaration_is_found() -> None:
    h = Harness()
    h.core._grown = {}  # type: ignore[attr-defined]  # a structure that would grow on a peer's behalf
    assert set(_held(h.core)) - set(HOLDINGS) == {"_grown"}
