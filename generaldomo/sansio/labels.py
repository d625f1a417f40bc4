"""How a peer is named in reports and log lines: one label for one peer, whoever writes the line.

This module owns the peer label: ``link/hash``, the index of the broker's link the peer came over and a keyed
hash (BLAKE2b, 4 bytes) of its address, so that the links' lines about a peer, the core's lines and the status
report's ``peer`` and ``connection`` fields can be matched, without revealing the routing ids libzmq generated
(they would help a squatter). The key is made once per broker and shared by its core and its links. It knows
nothing of sockets or where the key comes from (the caller gives it).
"""

from __future__ import annotations

import hashlib

__all__ = ["PeerLabels"]


class PeerLabels:
    """Names peers by ``(link, address)`` under one key.

    >>> labels = PeerLabels(b"k" * 16)
    >>> labels(0, b"peer") == labels(0, b"peer") != labels(1, b"peer")
    True
    >>> labels(0, b"peer").startswith("0/")
    True
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        self._key = key

    def __call__(self, link: int, address: object) -> str:
        """The label of the peer at ``address`` on link ``link``."""
        digest = hashlib.blake2b(repr(address).encode(), key=self._key, digest_size=4).hexdigest()
        return f"{link}/{digest}"
