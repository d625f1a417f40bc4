"""A generaldomo peer's side, without IO: the client's and the worker's session, the handshake watch, serializers.

Rules of this package: it is what a client or a worker decides (:mod:`.session`), what its socket monitor's
events mean (:mod:`.handshake`) and how payloads are typed (:mod:`.serializers`). It imports the wire, the
configuration and the package root, never :mod:`generaldomo.sansio.broker`: a peer knows the broker only by
its messages.
"""

__all__: list[str] = []
