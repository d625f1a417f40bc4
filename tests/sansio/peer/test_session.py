"""The sans-IO peer sessions, case by case: re-asking, resending on unknown, cancelling, the worker's cycle."""

from __future__ import annotations

from generaldomo.sansio.config.settings import PeerSettings
from generaldomo.sansio.peer.session import ClientSession, Reconnect, Resolve, RunTask, ToBroker, WorkerSession
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect
from generaldomo.sansio.wire.peer_events import FinalReply, HeartbeatAnswer, TaskRequest

PEER = PeerSettings(heartbeat_interval=1.0, liveness=3)


def sent(actions: list) -> list[list[bytes]]:
    return [list(a.frames) for a in actions if isinstance(a, ToBroker)]


def final(rid: bytes, body: bytes = b"ok") -> list[bytes]:
    return [protocol.GDP_CLIENT, b"\x03", rid, protocol.OK, b"", body]


def answer(instance: bytes = b"b1", unknown: tuple[bytes, ...] = ()) -> list[bytes]:
    return protocol.gdp_client_heartbeat(instance, unknown)


def test_peer_messages_are_events() -> None:
    assert protocol.read_client_message(final(b"r")) == FinalReply(b"r", protocol.OK, b"", (b"ok",))
    assert protocol.read_client_message(answer(b"i", (b"x",))) == HeartbeatAnswer(b"i", (b"x",))
    task = protocol.worker_request(Dialect.GDP, b"t", b"echo", [b"a", b""])
    assert protocol.read_worker_message(task) == TaskRequest(b"t", b"echo", (b"a", b""))
    assert protocol.gdp_cancel(b"r") == [b"GDPC01", b"\x05", b"r"]
    asked = protocol.gdp_client_heartbeat(ids=[b"a", b"b"])
    assert asked == [b"GDPC01", b"\x04", b"a", b"b"] and protocol.gdp_client_heartbeat() == [b"GDPC01", b"\x04"]


def test_heartbeats_ask_about_old_requests_oldest_first_64_per_heartbeat() -> None:
    session: ClientSession[None] = ClientSession(PEER, 0.0, reask_after=2.0)
    ids = [b"r%04d" % n for n in range(1100)]
    for request_id in ids:
        session.submit(request_id, b"echo", [], None, 0.0)
    assert sent(session.tick(0.5)) == [protocol.gdp_client_heartbeat()]  # none old enough yet

    def asked(now: float) -> list[list[bytes]]:
        heartbeats = [frames[2:] for frames in sent(session.tick(now))]
        session.receive(answer(), now)
        return heartbeats

    first = asked(3.0)
    assert [len(batch) for batch in first] == [64] * 16  # 1024 at most at once
    assert [rid for batch in first for rid in batch] == ids[:1024]
    assert asked(4.0) == [ids[1024:1088], ids[1088:]]  # the rest
    assert [rid for batch in asked(5.0) for rid in batch] == ids[:1024]  # again, those asked about longest ago
    assert session.resent == 0


def test_unknown_ids_are_sent_again_once_with_their_ids() -> None:
    session: ClientSession[None] = ClientSession(PEER, 0.0, reask_after=1.0)
    request = session.submit(b"r1", b"echo", [b"body"], None, 0.0)
    session.receive(answer(), 0.1)
    assert sent(session.tick(1.5)) == [protocol.gdp_client_heartbeat(ids=[b"r1"])]
    assert sent(session.receive(answer(unknown=(b"r1", b"never-mine")), 1.6)) == [request]
    # a second answer to a heartbeat sent before the resend says nothing about the resent request
    assert session.receive(answer(unknown=(b"r1",)), 1.7) == []
    assert session.resent == 1


def test_a_new_instance_gets_every_outstanding_request_again() -> None:
    session: ClientSession[str] = ClientSession(PEER, 0.0)
    frames = [session.submit(b"r%d" % n, b"echo", [], "caller", 0.0) for n in range(3)]
    session.receive(answer(b"one"), 0.1)
    assert sent(session.receive(answer(b"one"), 0.2)) == []
    assert sent(session.receive(answer(b"two"), 0.3)) == frames


def test_silence_while_waiting_reconnects_and_resends() -> None:
    session: ClientSession[None] = ClientSession(PEER, 0.0)
    frames = session.submit(b"r", b"echo", [], None, 0.0)
    assert sent(session.tick(1.0)) == sent(session.tick(2.0)) == [protocol.gdp_client_heartbeat()]
    actions = session.tick(3.5)
    assert isinstance(actions[0], Reconnect) and sent(actions) == [frames]
    for now in (4.5, 5.5, 6.5):
        session.tick(now)
    assert session.tick(7.0)[0] == Reconnect("broker silent for 3.5 s", silent=True)


def test_a_paused_client_does_not_blame_the_broker() -> None:
    session: ClientSession[None] = ClientSession(PEER, 0.0)
    session.submit(b"r", b"echo", [], None, 0.0)
    session.tick(1.0)
    assert sent(session.tick(9.0)) == [protocol.gdp_client_heartbeat(ids=[b"r"])]  # paused 8 s: no reconnect
    assert sent(session.tick(10.0)) == [protocol.gdp_client_heartbeat()]
    assert isinstance(session.tick(12.5)[0], Reconnect)  # silent while it listened


def test_cancel_says_so_and_drops_the_late_reply() -> None:
    session: ClientSession[None] = ClientSession(PEER, 0.0)
    session.submit(b"r", b"echo", [], None, 0.0)
    assert sent(session.cancel(b"r")) == [protocol.gdp_cancel(b"r")]
    assert session.cancel(b"r") == []
    assert session.receive(final(b"r"), 1.0) == [] and session.replies_dropped == 1
    assert session.tick(100.0) == [] and session.deadline() is None  # idle: no heartbeats, no reconnect


def test_the_farewell_asks_the_broker_to_confirm_the_cancels_only_when_some_were_sent() -> None:
    session: ClientSession[None] = ClientSession(PEER, 0.0)
    assert session.farewell(b"probe") == [] and session.farewell_heard  # nothing cancelled: nothing to confirm
    session.submit(b"r", b"echo", [], None, 0.0)
    session.cancel(b"r")
    assert sent(session.farewell(b"probe")) == [protocol.gdp_client_heartbeat(ids=[b"probe"])]
    assert not session.farewell_heard
    assert session.receive(answer(), 0.5) == [] and not session.farewell_heard  # an earlier heartbeat's answer
    assert session.receive(answer(unknown=(b"probe",)), 0.6) == [] and session.farewell_heard
    assert session.farewell(b"again") == []  # confirmed: nothing more to ask


def test_a_kept_answer_resolves_once() -> None:
    session: ClientSession[int] = ClientSession(PEER, 0.0, reask_after=1.0)
    session.submit(b"r", b"echo", [], 7, 0.0)
    session.submit(b"s", b"echo", [], 8, 1.1)
    assert sent(session.tick(1.5)) == [protocol.gdp_client_heartbeat(ids=[b"r"])]
    (resolved,) = session.receive(final(b"r", b"kept"), 1.6)  # crossed the heartbeat asking about it
    assert isinstance(resolved, Resolve) and resolved.token == 7 and resolved.body == (b"kept",)
    assert session.receive(final(b"r", b"kept"), 1.7) == []  # the broker's answer to that heartbeat
    session.receive(final(b"s"), 1.8)
    assert session.receive(final(b"s"), 1.9) == []  # never asked about: a duplicate
    assert (session.answers_repeated, session.replies_dropped) == (1, 1)


def test_worker_cycle_ready_task_result_disconnect() -> None:
    session = WorkerSession(b"echo", PEER, 0.0)
    assert sent(session.start()) == [protocol.gdp_ready(b"echo")] and not session.heard
    session.receive(protocol.worker_command(Dialect.GDP, protocol.HEARTBEAT), 0.05)
    assert session.heard
    (task,) = session.receive(protocol.worker_request(Dialect.GDP, b"t1", b"echo", [b"x"]), 0.1)
    assert task == RunTask(b"t1", b"echo", (b"x",))
    assert session.receive(protocol.worker_request(Dialect.GDP, b"t2", b"echo", []), 0.2) == []  # one at a time
    assert sent(session.tick(50.0)) == [protocol.gdp_worker_command(protocol.HEARTBEAT)]  # busy: no silence
    assert sent(session.partial([b"p"])) == [protocol.gdp_partial(b"t1", [b"p"])]
    result = protocol.gdp_ready(b"echo", (b"t1", protocol.OK, [b"r"]))
    assert sent(session.finish(protocol.OK, [b"r"], 51.0)) == [result]
    again = session.receive(protocol.worker_command(Dialect.GDP, protocol.DISCONNECT), 51.5)
    assert isinstance(again[0], Reconnect) and sent(again) == [protocol.gdp_ready(b"echo")] and not session.heard
    assert sent(session.stop()) == [protocol.gdp_worker_command(protocol.DISCONNECT)]
    assert session.stop() == [] and session.tick(100.0) == [] and session.finish(protocol.OK, [], 100.0) == []


def test_a_worker_asked_to_finish_sends_the_result_then_leaves() -> None:
    session = WorkerSession(b"echo", PEER, 0.0)
    session.receive(protocol.worker_request(Dialect.GDP, b"t1", b"echo", [b"x"]), 0.1)
    assert session.stop(finish=True) == [] and session.stop(finish=True) == []
    assert sent(session.tick(1.5)) == [protocol.gdp_worker_command(protocol.HEARTBEAT)]  # still heartbeating
    assert sent(session.finish(protocol.OK, [b"r"], 2.0)) == [
        protocol.gdp_ready(b"echo", (b"t1", protocol.OK, [b"r"])),
        protocol.gdp_worker_command(protocol.DISCONNECT),
    ]
    assert session.stop() == [] and session.deadline() is None
    cut_short = WorkerSession(b"echo", PEER, 0.0)
    cut_short.receive(protocol.worker_request(Dialect.GDP, b"t1", b"echo", [b"x"]), 0.1)
    cut_short.stop(finish=True)
    assert sent(cut_short.stop()) == [protocol.gdp_worker_command(protocol.DISCONNECT)]
    assert cut_short.finish(protocol.OK, [b"r"], 2.0) == []


def test_a_worker_registering_again_says_disconnect_on_its_old_socket_unless_a_task_runs() -> None:
    """Its old registration goes at once where the broker still hears the old socket; a running task stays the
    worker's (RESUME claims it on the new socket), so then it says nothing there."""
    disconnect = tuple(protocol.gdp_worker_command(protocol.DISCONNECT))
    heartbeat = [protocol.GDP_WORKER, b"\x05", b"I1"]  # a hand-over broker's
    session = WorkerSession(b"echo", PEER, 0.0)
    session.start()
    for now in (1.0, 2.0, 3.0):
        session.tick(now)
    assert session.tick(3.5)[0] == Reconnect("broker silent for 3.5 s", silent=True, farewell=disconnect)
    session.receive(heartbeat, 3.6)
    session.receive([protocol.GDP_WORKER, b"\x02", b"t1", b"echo", b"x"], 3.7)
    actions = session.receive([protocol.GDP_WORKER, b"\x06"], 3.8)  # the broker does not know it
    assert actions[0] == Reconnect("broker sent DISCONNECT") and sent(actions) == [protocol.gdp_resume(b"echo", b"t1")]
