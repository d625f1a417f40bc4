"""The resolver interface, the default name resolver, and loading resolvers by name."""

from __future__ import annotations

import pytest

from generaldomo.errors import ResolveError
from generaldomo.sansio.broker.services.resolver import NameResolver, Resolver, load_resolver


def test_name_resolver_is_majordomo() -> None:
    resolver = NameResolver()
    assert resolver.find(b"echo") is None
    service = resolver.for_worker(b"echo")
    assert resolver.for_request(b"echo") is service and resolver.find(b"echo") is service
    assert resolver.for_request(b"other") is not service
    assert [s.name for s in resolver.services()] == ["echo", "other"]
    assert isinstance(resolver, Resolver)


@pytest.mark.parametrize("description", [b"", b"\xff"])
def test_name_resolver_refuses_bad_names(description: bytes) -> None:
    with pytest.raises(ResolveError):
        NameResolver().for_request(description)


def test_load_resolver() -> None:
    assert isinstance(load_resolver("generaldomo.sansio.broker.services.resolver:NameResolver"), NameResolver)
    with pytest.raises(ValueError):
        load_resolver("generaldomo.sansio.broker.services.resolver")
    with pytest.raises(TypeError):
        load_resolver("collections:OrderedDict")
    with pytest.raises(ImportError):
        load_resolver("no_such_module:X")


def test_forget_drops_only_the_service_given() -> None:
    resolver = NameResolver()
    echo, other = resolver.for_request(b"echo"), resolver.for_request(b"other")
    resolver.forget(echo)
    resolver.forget(echo)  # twice is harmless
    assert [s.name for s in resolver.services()] == ["other"] and resolver.find(b"echo") is None
    assert resolver.for_request(b"echo") is not echo  # a new one when asked for again
    resolver.forget(other)
    assert resolver.find(b"other") is None


def test_a_resolver_without_forget_still_loads() -> None:
    resolver = load_resolver("test_resolver:Legacy")
    assert not hasattr(resolver, "forget")


class Legacy:
    """A third-party resolver written before ``forget`` existed."""

    def for_worker(self, description: bytes) -> object: ...
    def for_request(self, description: bytes) -> object: ...
    def find(self, description: bytes) -> object: ...
    def services(self) -> list[object]:
        return []
