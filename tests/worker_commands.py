"""The broker's messages to a generaldomo worker in the tuple form the tests compare, read with the peers'
reader (:func:`generaldomo.sansio.wire.peer_readers.read_worker_message`)."""

from __future__ import annotations

from collections.abc import Sequence

from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.peer_events import BrokerHeartbeat, TaskCancel, TaskRequest


def parse_worker_command(frames: Sequence[bytes]) -> tuple[str, tuple[bytes, ...]] | None:
    """``(command, arguments)`` of a broker message to a generaldomo worker, or None if it is not one."""
    message = protocol.read_worker_message(frames)
    if isinstance(message, TaskRequest):
        return protocol.REQUEST, (message.task_id, message.description, *message.body)
    if isinstance(message, TaskCancel):
        return protocol.CANCEL, (message.task_id,)
    if isinstance(message, protocol.Malformed):
        return None
    return (protocol.HEARTBEAT if isinstance(message, BrokerHeartbeat) else protocol.DISCONNECT), ()
