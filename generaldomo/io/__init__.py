"""The IO layer: sockets, threads and clocks around the state machines of :mod:`generaldomo.sansio`.

Links and the broker loop drive the broker core; connections carry the peers' sessions; the beacon, the
metrics server and the bridge are the other places where bytes meet the network.
"""

__all__: list[str] = []
