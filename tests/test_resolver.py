"""The resolver interface, the default name resolver, and loading resolvers by name."""

from __future__ import annotations

import pytest

from generaldomo.sansio.resolver import NameResolver, ResolveError, Resolver, load_resolver


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
    assert isinstance(load_resolver("generaldomo.sansio.resolver:NameResolver"), NameResolver)
    with pytest.raises(ValueError):
        load_resolver("generaldomo.sansio.resolver")
    with pytest.raises(TypeError):
        load_resolver("collections:OrderedDict")
    with pytest.raises(ImportError):
        load_resolver("no_such_module:X")
