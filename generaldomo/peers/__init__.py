"""The peers' public API: :class:`~generaldomo.peers.client.Client` and :class:`~generaldomo.peers.worker.Worker`."""

__all__: list[str] = []
