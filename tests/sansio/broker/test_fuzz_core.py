"""The fuzzer against the sans-IO layer: the parsers, the codec, and the broker core among honest and hostile peers.

Invariants (see :mod:`fuzz_scene`): nothing raises and the core's barrier catches nothing (``internal_errors``
stays 0); every honest request of every dialect is answered exactly once, with its own result or an error
status an honest peer may get; the ledger adds up, never exceeds its budgets or caps, and its accounts return
to zero once everybody has left. Cases per test: :mod:`fuzz_profiles` (``tox`` runs the ``ci`` profile,
``tox -e fuzz`` the long one).
"""

from __future__ import annotations

from collections.abc import Iterator

import fuzz_strategies as fs
import pytest
from fuzz_profiles import fuzz_settings
from fuzz_scene import HOSTILE_IDENTITIES, HOSTILE_ROUTING_IDS, Scene
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from generaldomo import errors
from generaldomo.sansio.broker.access import Credential, Role
from generaldomo.sansio.wire import codec, envelope, protocol
from generaldomo.sansio.wire.events import Dialect

SENDERS = st.integers(0, len(HOSTILE_IDENTITIES) + len(HOSTILE_ROUTING_IDS) - 1)
STEPS = st.sampled_from([0.0, 0.0, 0.0, 0.01, 0.3, 1.0])  # seconds between hostile messages
CREDENTIALS = st.one_of(
    st.none(),
    st.builds(
        Credential, st.sampled_from(["k1", "k2", ""]), st.frozensets(st.sampled_from(list(Role))),
        st.sampled_from([(), ("a*",), ("*",), ("echo",)]),
    ),
)  # fmt: skip
HONEST_DIALECTS = list(Dialect)
SERVICES = st.sampled_from([b"svc", b"a", b"b"])  # the hostile peers' services (never the honest one)
_RETRY_AFTERS = st.sampled_from([b"0.5", b"0", b"1e400", b"9" * 16, b"9" * 17, b"nan", b"-1", b"."])


@given(st.binary(max_size=64) | fs.server_parts(), st.sampled_from([None, 0, 1, 3, 1024]))
@fuzz_settings(600)
def test_the_codec_decodes_within_bounds_or_says_why(data: bytes, max_frames: int | None) -> None:
    try:
        frames = codec.decode(data, max_frames)
    except errors.TooManyFrames:
        assert max_frames is not None
        return
    except errors.CodecError:
        return
    assert max_frames is None or len(frames) <= max_frames
    assert codec.encode(frames) == data  # the layout has one encoding per message


@given(fs.hops(), fs.messages())
@fuzz_settings(1000)
def test_every_parser_takes_every_message(hops: list[bytes], message: list[bytes]) -> None:
    address, frames = envelope.split(b"peer", [*hops, *message])
    assert address == b"peer" or (isinstance(address, tuple) and address[0] == b"peer")
    assert isinstance(address, bytes) or 1 < len(address) <= envelope.MAX_HOPS
    protocol.parse(frames)  # never raises, whatever the frames
    protocol.read_client_message(message)  # the peers' readers of what a (hostile) broker sends
    protocol.read_worker_message(message)
    protocol.parse_mdp_client_reply(message)


@pytest.fixture
def scenes() -> Iterator[list[Scene]]:
    made: list[Scene] = []
    yield made
    for scene in made:
        scene.close()


def served_scene(keyed: bool) -> Scene:
    """A scene with an honest worker and an honest client of every dialect."""
    scene = Scene(keyed=keyed)
    for dialect in HONEST_DIALECTS:
        scene.add_worker(dialect)
        scene.add_client(dialect)
    return scene


def honest_round_trips(scene: Scene) -> None:
    """Every honest client asks once more; each is answered once, with its result; then everybody leaves."""
    for client in list(scene.clients.values()):
        scene.ask(client)
    scene.drain()
    scene.answered_once()
    assert all(set(client.statuses) == {protocol.OK} for client in scene.clients.values()), "refused after"
    scene.leave()


@pytest.mark.parametrize("keyed", [False, True], ids=["plaintext", "keyed"])
def test_the_corpus(keyed: bool) -> None:
    """Every message of the corpus in turn, from each hostile sender in turn (with a credential of random roles
    when keyed), into one broker serving honest peers; then the honest peers are served."""
    scene = served_scene(keyed)
    roles = [frozenset(), frozenset({Role.CLIENT}), frozenset({Role.WORKER}), frozenset(Role)]
    try:
        for n, (what, route, message) in enumerate(fs.corpus()):
            credential = Credential(f"k{n % 3}", roles[n % len(roles)], ("a*",) if n % 2 else ())
            try:
                scene.hostile(message, n % 5, route, credential)
                scene.check()
                if n % 50 == 0:
                    scene.advance(0.3)
            except AssertionError as error:
                raise AssertionError(f"after {what}: {error}") from error
        honest_round_trips(scene)
    finally:
        scene.close()


@given(keyed=st.booleans(), sender=SENDERS, hops=fs.hops(), message=fs.messages(), credential=CREDENTIALS)
@fuzz_settings(1000)
def test_one_hostile_message(
    keyed: bool, sender: int, hops: list[bytes], message: list[bytes], credential: Credential | None
) -> None:
    scene = served_scene(keyed)
    try:
        scene.hostile(message, sender, hops, credential)
        scene.check()
        honest_round_trips(scene)
    finally:
        scene.close()


@given(
    keyed=st.booleans(),
    batch=st.lists(st.tuples(SENDERS, fs.hops(), fs.messages(), STEPS, CREDENTIALS), min_size=2, max_size=30),
)
@fuzz_settings(200)
def test_a_batch_of_hostile_messages_leaves_honest_peers_served(keyed: bool, batch: list) -> None:
    scene = served_scene(keyed)
    try:
        for sender, hops, message, step, credential in batch:
            if step:
                scene.advance(step)
            scene.hostile(message, sender, hops, credential)
            scene.check()
        honest_round_trips(scene)
    finally:
        scene.close()


class HostileMachine(RuleBasedStateMachine):
    """Honest clients and workers of every dialect come and go among hostile peers that know the task ids and
    request ids they have seen; time passes in steps."""

    keyed = False
    handover = False

    def __init__(self) -> None:
        super().__init__()
        self.scene = Scene(keyed=self.keyed, handover=self.handover)

    @initialize(dialects=st.lists(st.sampled_from(HONEST_DIALECTS), min_size=1, max_size=3))
    def honest_peers(self, dialects: list[Dialect]) -> None:
        for dialect in dialects:
            self.scene.add_worker(dialect, features=dialect is Dialect.GDP)
        for dialect in HONEST_DIALECTS:
            self.scene.add_client(dialect)

    @rule(dialect=st.sampled_from(HONEST_DIALECTS), features=st.booleans())
    def honest_worker_joins(self, dialect: Dialect, features: bool) -> None:
        self.scene.add_worker(dialect, features)

    @rule(data=st.data())
    def honest_client_asks(self, data: st.DataObject) -> None:
        self.scene.ask(data.draw(st.sampled_from(list(self.scene.clients.values()))))

    @precondition(lambda self: any(w.task is not None for w in self.scene.workers.values()))
    @rule(data=st.data())
    def honest_worker_answers(self, data: st.DataObject) -> None:
        busy = [w for w in self.scene.workers.values() if w.task is not None]
        self.scene.answer(data.draw(st.sampled_from(busy)))

    @rule(data=st.data(), sender=SENDERS, hops=fs.hops(), credential=CREDENTIALS)
    def hostile_peer_sends(self, data: st.DataObject, sender: int, hops: list[bytes], credential: object) -> None:
        message = data.draw(fs.messages(self.scene.tasks[-8:], self.scene.requests[-8:]))
        self.scene.hostile(message, sender, hops, credential)  # type: ignore[arg-type]

    # hostile peers that follow the protocol's shape, so that what they send reaches the core's state:
    # registered workers answering their tasks with odd results, clients whose requests live and who cancel,
    # re-ask, or reuse their ids from elsewhere

    @rule(sender=SENDERS, hops=fs.hops(), dialect=st.sampled_from(HONEST_DIALECTS), service=SERVICES,
          info=st.sampled_from([None, *fs.peer_infos()[:8]]), credential=CREDENTIALS)  # fmt: skip
    def hostile_worker_registers(
        self, sender: int, hops: list[bytes], dialect: Dialect, service: bytes, info: bytes | None,
        credential: Credential | None,
    ) -> None:  # fmt: skip
        if dialect is Dialect.GDP:
            frames = protocol.gdp_ready(service, info=info)
        else:
            frames = [*fs.head(dialect, True, protocol.READY), service]
        self.scene.hostile(frames, sender, hops, credential)

    @precondition(lambda self: self.scene.given)
    @rule(data=st.data(), status=st.sampled_from(fs.statuses()), body=st.sampled_from(fs.body_lists()[:3]),
          how=st.sampled_from(["final", "partial", "elsewhere", "retry after", "handover"]))  # fmt: skip
    def hostile_worker_answers(self, data: st.DataObject, status: bytes, body: list[bytes], how: str) -> None:
        peer = data.draw(st.sampled_from(sorted(self.scene.given, key=repr)))
        dialect, task = self.scene.given.pop(peer)
        if dialect is not Dialect.GDP:
            command = protocol.PARTIAL if how == "partial" and dialect is not Dialect.MDP01 else protocol.FINAL
            frames = [*fs.head(dialect, True, command), task, b"", *body]
        elif how == "partial":
            frames = protocol.gdp_partial(task, body)
        elif how == "retry after":
            frames = protocol.gdp_ready(b"svc", (task, protocol.OVER_BUDGET, [b"slow", data.draw(_RETRY_AFTERS)]))
        elif how == "handover":
            frames = protocol.gdp_handover(task, status, body)
        else:
            frames = protocol.gdp_ready(b"a" if how == "elsewhere" else b"svc", (task, status, body))
        self.scene.hostile_at(peer, frames, data.draw(CREDENTIALS))

    @rule(sender=SENDERS, hops=fs.hops(), service=SERVICES, fields=st.sampled_from([b"", *fs.fields_frames()]),
          body=st.sampled_from(fs.body_lists()[:3]), known=st.booleans(), credential=CREDENTIALS)  # fmt: skip
    def hostile_client_requests(
        self, sender: int, hops: list[bytes], service: bytes, fields: bytes, body: list[bytes], known: bool,
        credential: Credential | None,
    ) -> None:  # fmt: skip
        rid = self.scene.requests[-1] if known and self.scene.requests else self.scene.ids.randbytes(16)
        self.scene.hostile(protocol.gdp_request(rid, service, body, fields), sender, hops, credential)

    @precondition(lambda self: self.scene.requests)
    @rule(data=st.data(), sender=SENDERS, hops=fs.hops(), credential=CREDENTIALS,
          how=st.sampled_from(["cancel", "reask", "again"]))  # fmt: skip
    def hostile_client_follows_up(
        self, data: st.DataObject, sender: int, hops: list[bytes], credential: Credential | None, how: str
    ) -> None:  # fmt: skip
        rid = data.draw(st.sampled_from(self.scene.requests[-8:]))
        if how == "cancel":
            frames = protocol.gdp_cancel(rid)
        elif how == "reask":
            frames = protocol.gdp_client_heartbeat(ids=[rid])
        else:  # the same id again, for another body perhaps, perhaps from elsewhere
            frames = protocol.gdp_request(rid, b"svc", [data.draw(st.sampled_from([b"payload", b"other"]))])
        self.scene.hostile(frames, sender, hops, credential)

    @rule(seconds=st.sampled_from([0.1, 0.5, 1.0]))
    def time_passes(self, seconds: float) -> None:
        self.scene.advance(seconds)

    @invariant()
    def holds(self) -> None:
        self.scene.check()

    def teardown(self) -> None:
        try:
            self.scene.drain()
            self.scene.answered_once()
            self.scene.leave()
        finally:
            self.scene.close()


class KeyedHostileMachine(HostileMachine):
    """The same with credentials: honest peers hold their roles, hostile ones random roles and patterns."""

    keyed = True


class HandoverHostileMachine(HostileMachine):
    """The same on a broker with a state directory: task ids are tickets, and workers may RESUME and HANDOVER."""

    handover = True


HostileMachine.TestCase.settings = fuzz_settings(60, steps=60)
KeyedHostileMachine.TestCase.settings = fuzz_settings(30, steps=60)
HandoverHostileMachine.TestCase.settings = fuzz_settings(30, steps=60)
TestHostileMachine = HostileMachine.TestCase
TestKeyedHostileMachine = KeyedHostileMachine.TestCase
TestHandoverHostileMachine = HandoverHostileMachine.TestCase
