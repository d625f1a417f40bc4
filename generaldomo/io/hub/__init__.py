"""The broker's side of the IO layer: its links (the only broker code that touches sockets), the replies its
peers have not read yet, its state directory, and its metrics. Nothing here knows a peer's side
(:mod:`generaldomo.io.peer`); the broker process and the bridge (:mod:`generaldomo.io.broker`,
:mod:`generaldomo.io.bridge`) drive these."""

__all__: list[str] = []
