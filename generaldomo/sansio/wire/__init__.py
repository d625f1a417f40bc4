"""What is on the wire: the frames of every message, their field bounds, and what each message means.

Rules of this package: it turns frames into the events the broker and the peers hear (:mod:`.events`,
:mod:`.peer_events`: the broker with :mod:`.readers`, the peers with :mod:`.peer_readers`) and builds the frames they
send (:mod:`.writers`, :mod:`.peer_writers`), by the dialects' tables (:mod:`.dialects`, :mod:`.statuses`,
:mod:`.fields`, :mod:`.inner_frames`; :mod:`.protocol` gathers their names), within the bounds of one table
(:mod:`.limits`); it also packs frames into single parts (:mod:`.codec`), reads return addresses
(:mod:`.envelope`), JSON a peer sent (:mod:`.wirejson`) and task ids (:mod:`.ticket`). It knows nothing of what
the broker or a peer decides, of settings, sockets or clocks; it imports only :mod:`generaldomo.sansio`'s own
modules (the package root) besides itself.
"""

__all__: list[str] = []
