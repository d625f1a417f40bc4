"""A peer's side of the IO layer: its connection to the broker, the socket monitor that watches the handshake,
and the locator that finds and follows the broker. Nothing here knows the broker's side
(:mod:`generaldomo.io.hub`); clients, workers and the bridge's client side drive these."""

__all__: list[str] = []
