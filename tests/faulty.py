"""A resolver that fails on purpose, for the tests that inject failures into a real broker process
(``generaldomo broker --resolver faulty:FaultyResolver`` with this directory on PYTHONPATH)."""

from __future__ import annotations

from generaldomo.sansio.broker.services.resolver import NameResolver
from generaldomo.sansio.broker.services.service import Service

RAISE = b"faulty.raise"  # mmi.service with this body: an Exception the broker does not expect
ESCAPE = b"faulty.escape"  # a request for this service: an error that is no Exception, which ends the loop


class Injected(BaseException):
    """Not an Exception: no barrier catches it."""


class FaultyResolver(NameResolver):
    """Plain service names, except for the descriptions above."""

    def find(self, description: bytes) -> Service | None:
        if description == RAISE:
            raise RuntimeError("injected by the test")
        return super().find(description)

    def for_request(self, description: bytes) -> Service:
        if description == ESCAPE:
            raise Injected("injected by the test")
        return super().for_request(description)
