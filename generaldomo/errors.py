"""The errors generaldomo raises at its users: one family under :class:`GeneraldomoError`.

Rules: every exception class generaldomo defines derives from :class:`GeneraldomoError`, so that
``except GeneraldomoError`` catches whatever the package raises, and keeps the standard base a caller would
catch without knowing generaldomo (``RequestTimeout`` is a ``TimeoutError``, ``HandshakeFailed`` a
``ConnectionError``, a bad description a ``ValueError``). Every one is defined here and imports from
``generaldomo`` too; the modules that raise them import them from here (their old paths, such as
``generaldomo.peers.client.RequestFailed``, still give the same class, with a ``DeprecationWarning``). One is
defined beside its code: :class:`generaldomo.BindError` (:mod:`generaldomo.io.transport`) is also a
``zmq.ZMQError`` (code written for pyzmq catches a failed bind as one), and this module must not import pyzmq
(the IO-free layer imports it, and ``python -m generaldomo.draft`` runs while pyzmq is being replaced). Two
exceptions are not in the family, on purpose: :class:`generaldomo.Reject` is a handler's *answer* (the worker
turns it into a status for the client; no user catches it, and ``except GeneraldomoError`` in a handler must
not swallow it), and the draft builder's ``BuildError`` (:mod:`generaldomo.draft` imports only the standard
library, to run from a source tree).

The family::

    GeneraldomoError
    ├── RequestFailed                   an error reply: .status (int), .status_bytes, .reason
    │   ├── RequestRejected             4xx: the broker refused the request
    │   │   └── NotFound                404: no worker serves the service (fail_unknown), or no such id (fetch)
    │   ├── WorkerError                 500: the handler raised
    │   ├── ServiceUnavailable          503: the task's workers kept disappearing
    │   └── RequestExpired              504: its deadline passed (also a TimeoutError)
    ├── RequestTimeout                  (TimeoutError) no reply within the time
    ├── ClientClosed                    (RuntimeError) the client closed before the reply came
    ├── HandshakeFailed                 (ConnectionError) the broker refuses this peer's connection
    │   └── BrokerUnreachable           nothing accepts connections at the endpoint
    ├── WorkerStopped                   (RuntimeError) Worker.serve stopped by itself
    ├── DiscoveryError                  (LookupError) no broker found
    ├── DraftUnavailable                (RuntimeError) this pyzmq lacks CLIENT/SERVER sockets
    ├── ResolveError                    (ValueError) a description the resolver refuses
    ├── ContentTypeError, DecodeError   (ValueError) a typed payload of the wrong type, or undecodable
    ├── AppImportError                  (ImportError) a worker app's module raised while imported
    ├── AppSpecError                    (LookupError) a worker app spec names no attribute or service there
    ├── KeyFileError                    (ValueError) a CURVE certificate file that cannot be used
    ├── StateError                      (ValueError) a broker state directory that cannot be used
    ├── PairBroken                      (RuntimeError) a broker pair heard two actives or two passives
    ├── SettingsError                   (ValueError) an embedded broker's setting the broker command refuses
    ├── LoopFailed                      (RuntimeError) a serving loop stopped because of an error
    │   ├── BrokerFailed                the broker's
    │   └── BridgeFailed                the bridge's
    ├── BindError                       (zmq.ZMQError) an endpoint that cannot be bound (in generaldomo.io.transport)
    ├── TooManyStreams                  (RuntimeError) the dashboard's event streams are at their cap
    ├── CodecError                      (ValueError) a CLIENT/SERVER message part that is not well-formed frames
    │   └── TooManyFrames               more frames than allowed
    ├── WireJSONError                   (ValueError) JSON from a peer, malformed or outside the bounds
    ├── ManagementError                 (ValueError) an mmi request the broker cannot act on (400)
    │   ├── Forbidden                   the sender's role does not allow it (403)
    │   └── OverBudget                  its change does not fit the broker's budgets (429)
    └── IllegalTransition               (RuntimeError) a state machine told an event it has no move for (a bug)

It imports nothing of generaldomo (every layer imports it) and knows nothing of sockets; the status codes the
families stand for are the protocol's (:mod:`generaldomo.sansio.wire.protocol`, tests/package/test_errors.py checks
they agree).
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "AppImportError",
    "AppSpecError",
    "BridgeFailed",
    "BrokerFailed",
    "BrokerUnreachable",
    "ClientClosed",
    "CodecError",
    "ContentTypeError",
    "DecodeError",
    "DiscoveryError",
    "DraftUnavailable",
    "Forbidden",
    "GeneraldomoError",
    "HandshakeFailed",
    "IllegalTransition",
    "KeyFileError",
    "LoopFailed",
    "ManagementError",
    "NotFound",
    "OverBudget",
    "PairBroken",
    "RequestExpired",
    "RequestFailed",
    "RequestRejected",
    "RequestTimeout",
    "ResolveError",
    "ServiceUnavailable",
    "SettingsError",
    "StateError",
    "TooManyFrames",
    "TooManyStreams",
    "WireJSONError",
    "WorkerError",
    "WorkerStopped",
]


class GeneraldomoError(Exception):
    """The base of every exception generaldomo raises (see the module docstring for the family).

    Example::

        try:
            answer = client.request("resize", image, timeout=30)
        except GeneraldomoError as error:  # whatever generaldomo raised: a status, a timeout, a refused handshake
            log.warning("resize failed: %s", error)
    """


class RequestFailed(GeneraldomoError):
    """The broker or the worker answered the request with an error status (``.status``, an int).

    Args:
        status: the status code (``b"404"`` or ``404``).
        reason: the broker's or worker's text.
        retry_after: for a ``429``, the seconds after which the refusing side expects room again, when it said
            (:class:`~generaldomo.Client` waits that long and sends the request again, within its timeout).

    Example::

        try:
            client.request("resize", b"not an image", timeout=10)
        except RequestFailed as error:
            print(error.status, error.reason)  # 500 "ValueError: ..."
    """

    def __init__(self, status: bytes | int, reason: str, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        self.status_bytes = status if isinstance(status, bytes) else str(status).encode()
        digits = self.status_bytes  # exactly 3 ASCII digits, as a status is on the wire (else 0)
        self.status = int(digits) if len(digits) == 3 and digits.isdigit() and digits.isascii() else 0
        self.reason = reason
        super().__init__(f"{self.status_bytes.decode(errors='replace')}: {reason}")

    @staticmethod
    def of(status: bytes, reason: str, retry_after: float | None = None) -> RequestFailed:
        """The exception for ``status``: the subclass of its family, or this class for other codes.

        Args:
            status: the status as the broker sent it (ASCII digits).
            reason: the text that came with it.
            retry_after: a 429's seconds to wait before sending again, if it gave them.
        """
        family = _FAMILIES.get(status) or (RequestRejected if status[:1] == b"4" else RequestFailed)
        return family(status, reason, retry_after)


class RequestRejected(RequestFailed):
    """4xx: the broker refused the request (bad description 400, forbidden 403, too large 413, over budget 429).

    Example::

        try:
            client.request("echo", b"x" * 10**9, timeout=10)
        except RequestRejected as error:  # 413: larger than the broker's --max-message
            print(error.status)
    """


class WorkerError(RequestFailed):
    """500: the worker's handler raised, or returned something that cannot be sent.

    Example::

        try:
            client.request("divide", b"1/0", timeout=10)
        except WorkerError as error:
            print(error.reason)  # "ZeroDivisionError: division by zero"
    """

    code: ClassVar[bytes] = b"500"  # the protocol's WORKER_ERROR


class ServiceUnavailable(RequestFailed):
    """503: the task could not be served (its workers kept disappearing: ``max_attempts`` reached).

    Example::

        try:
            client.request("crashy", b"", timeout=60)
        except ServiceUnavailable:  # its workers died with it max_attempts times
            ...
    """

    code: ClassVar[bytes] = b"503"  # the protocol's UNAVAILABLE


class NotFound(RequestRejected):
    """404: no worker serves the service and none did recently (a request made with ``fail_unknown``), the
    broker has no request with the id a :meth:`Client.fetch` asked for, or a handler answered ``Reject(404,
    ...)``.

    Example::

        with Client("tcp://127.0.0.1:5555", fail_unknown=True) as client:
            try:
                client.request("ehco", b"hi", timeout=10)
            except NotFound as error:
                print(error.reason)  # "no worker serves 'ehco' ...; did you mean 'echo'?"
    """

    code: ClassVar[bytes] = b"404"  # the protocol's NOT_FOUND


class RequestExpired(RequestFailed, TimeoutError):
    """504: the request's deadline passed, or it waited in the broker's queue longer than its ``queue_timeout``.
    A ``TimeoutError`` too: a :meth:`Client.request` whose timeout (its deadline) the broker saw pass first
    raises this rather than :class:`RequestTimeout`.

    Example::

        try:
            client.submit("slow", b"", deadline=0.5).result(10)
        except RequestExpired:  # no worker took it within half a second
            ...
    """

    code: ClassVar[bytes] = b"504"  # the protocol's EXPIRED


_FAMILIES: dict[bytes, type[RequestFailed]] = {
    family.code: family for family in (NotFound, WorkerError, ServiceUnavailable, RequestExpired)
}


class ClientClosed(GeneraldomoError, RuntimeError):
    """The client was closed, or its IO thread stopped (``__cause__`` says why), before the request was answered.

    Example::

        client.close()
        try:
            client.request("echo", b"late")
        except ClientClosed:
            ...
    """


class RequestTimeout(GeneraldomoError, TimeoutError):
    """No reply within the time; the message says whether a broker ever answered at the endpoint.

    Example::

        try:
            client.request("echo", b"hi", timeout=2)
        except RequestTimeout as error:  # says whether any broker answered at the endpoint
            print(error)
    """


class HandshakeFailed(GeneraldomoError, ConnectionError):
    """The broker at the endpoint refused this peer's connection, which trying again will not fix: it speaks the
    other transport, or CURVE is missing, not wanted, or has the wrong key; ``.kind`` (``curve``, ``key``,
    ``handshake``: the other transport or CURVE, see :mod:`generaldomo.sansio.peer.handshake`) and the message say
    which. Raised within about a second of the failed handshake.

    Args:
        kind: ``handshake``, ``curve`` or ``key`` (above).
        cause: the sentence naming the cause and its fix.

    Example::

        with Client("tcp://127.0.0.1:5555", "server") as client:  # a ROUTER broker listens there
            try:
                client.request("echo", b"hi", timeout=60)
            except HandshakeFailed as error:  # within about a second
                print(error.kind, error)  # handshake ... try --transport router ...
    """

    def __init__(self, kind: str, cause: str) -> None:
        super().__init__(cause)
        self.kind = kind


class BrokerUnreachable(HandshakeFailed):
    """Nothing accepts connections at the endpoint (``.kind`` ``unreachable``): no broker runs there, or the
    host, port or path is wrong. A :class:`~generaldomo.Client` that never reached a broker fails its requests
    with it within about a second (libzmq's refused connection attempts), unless made with
    ``fail_unreachable=False`` (a client that starts before its broker); the message names the endpoint.

    Example::

        with Client("tcp://127.0.0.1:5999") as client:  # nothing listens there
            try:
                client.request("echo", b"hi", timeout=60)
            except BrokerUnreachable as error:  # within about a second
                print(error)  # nothing accepts connections at tcp://127.0.0.1:5999: is a broker running there...
    """

    @staticmethod
    def of(kind: str, cause: str) -> HandshakeFailed:
        """The exception for a failure of ``kind`` (see :mod:`generaldomo.sansio.peer.handshake`): this class for
        ``unreachable``, :class:`HandshakeFailed` for the others."""
        return BrokerUnreachable(kind, cause) if kind == "unreachable" else HandshakeFailed(kind, cause)


class WorkerStopped(GeneraldomoError, RuntimeError):
    """:meth:`Worker.serve` stopped for a reason other than :meth:`Worker.stop` (``__cause__`` says which).

    Example::

        try:
            worker.serve()
        except WorkerStopped as error:
            log.error("the worker stopped: %r", error.__cause__)
    """


class DiscoveryError(GeneraldomoError, LookupError):
    """No broker was found.

    Example::

        try:
            client = Client()  # no endpoint: GENERALDOMO_BROKER, the address file, then a beacon (5 s)
        except DiscoveryError as error:
            print(error)
    """


class DraftUnavailable(GeneraldomoError, RuntimeError):
    """The installed pyzmq/libzmq lacks the draft API that CLIENT and SERVER sockets need.

    Example::

        try:
            Client("tcp://127.0.0.1:5556", "server")
        except DraftUnavailable as error:  # names this environment's install command
            print(error)
    """


class ResolveError(GeneraldomoError, ValueError):
    """A description the resolver cannot accept; the broker answers the client with an error.

    Example::

        class Strict(NameResolver):
            def for_request(self, description: bytes) -> Service:
                if not description.isascii():
                    raise ResolveError("service names are ASCII")  # the client gets 400 with this text
                return super().for_request(description)
    """


class ContentTypeError(GeneraldomoError, ValueError):
    """The payload's content type is not the one expected (``actual`` None: raw bytes, no content type).

    Args:
        expected: the content type the serializer expects (None: raw bytes).
        actual: the one that came (None: raw bytes, no content type).
        what: what was decoded (``payload``, ``reply``, ``partial reply``).

    Example::

        try:
            TypedClient(client, "json").request("echo-bytes", [1], timeout=10)
        except ContentTypeError as error:  # the worker answered raw bytes
            print(error)
    """

    status = 415

    def __init__(self, expected: str | None, actual: str | None, what: str = "payload") -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(f"the {what} is {_kind(actual)} but {_kind(expected)} was expected")


def _kind(name: str | None) -> str:
    return "raw bytes (no content type)" if name is None else f"content type {name!r}"


class DecodeError(GeneraldomoError, ValueError):
    """The body could not be decoded by the serializer its content type names.

    Example::

        try:
            typed.request("broken-json", {"a": 1}, timeout=10)
        except DecodeError as error:
            print(error)
    """

    status = 400


class AppImportError(GeneraldomoError, ImportError):
    """The module of a ``module:attr`` spec raised while it was imported; the message carries its traceback
    (file, line and code of each frame of the user's module) and ``__cause__`` the exception.

    Example::

        try:
            run_app("mymodule:app", "tcp://127.0.0.1:5555")
        except AppImportError as error:  # mymodule raised while imported
            print(error)  # with the file, line and code of each frame
    """


class AppSpecError(GeneraldomoError, LookupError):
    """A ``module:attr`` spec, or a service selected from its app, names nothing there; the message names the
    nearest that is (``did you mean ...?``) and what there is.

    Example::

        try:
            run_app("tasks:ap", "tcp://127.0.0.1:5555")
        except AppSpecError as error:
            print(error)  # 'tasks' has no attribute 'ap' (from 'tasks:ap'); did you mean 'app'?
    """


class KeyFileError(GeneraldomoError, ValueError):
    """A certificate file is missing, unreadable or lacks the key asked for.

    Example::

        try:
            load_secret("keys/alice.key")  # the public half: no secret key in it
        except KeyFileError as error:
            print(error)
    """


class StateError(GeneraldomoError, ValueError):
    """The state directory cannot be used: unreadable, malformed, or in use by another broker.

    Example::

        try:
            Broker("router", ["tcp://127.0.0.1:*"], state_dir="/var/lib/generaldomo")
        except StateError as error:  # not writable, or another broker holds it
            print(error)
    """


class PairBroken(GeneraldomoError, RuntimeError):
    """The broker pair is broken: this broker heard its peer say *active* while it was active itself (two brokers
    would serve), or *passive* while it was passive (none would). The broker stops serving (its loop fails with
    this error as the ``__cause__`` of :class:`BrokerFailed`) until an operator restarts it, which makes it the
    passive one of the pair.

    Example::

        try:
            broker.join()  # a Broker run with pair=PairConfig(...)
        except BrokerFailed as error:
            if isinstance(error.__cause__, PairBroken):
                log.error("restart this broker once the other one serves: %s", error.__cause__)
    """


class SettingsError(GeneraldomoError, ValueError):
    """A setting that the broker command does not take, or a value it refuses; the message says which.

    Example::

        try:
            EmbeddedBroker(context_address, [("no-such-flag", "1")])
        except SettingsError as error:  # the broker command has no --no-such-flag
            print(error)
    """


class LoopFailed(GeneraldomoError, RuntimeError):
    """A serving loop stopped because of an error (its ``__cause__``): it serves nothing any more. Raised as its
    owner's kind: :class:`BrokerFailed` or :class:`BridgeFailed`.

    Example::

        try:
            server.join()  # a Broker or a Bridge
        except LoopFailed as error:
            log.error("stopped serving: %r", error.__cause__)
    """


class BrokerFailed(LoopFailed):
    """The broker's loop stopped because of an error (its ``__cause__``): the broker serves nothing any more.
    :meth:`Broker.join`, :meth:`Broker.check` and :meth:`Broker.stop` raise it.

    Example::

        broker = Broker("router", ["tcp://127.0.0.1:*"]).start()
        try:
            broker.join()
        except BrokerFailed as error:
            log.error("the broker stopped: %r", error.__cause__)
    """


class BridgeFailed(LoopFailed):
    """The bridge's loop stopped because of an error (its ``__cause__``): the bridge serves nothing any more.
    :meth:`~generaldomo.io.bridge.Bridge.join`, :meth:`~generaldomo.io.bridge.Bridge.check` and
    :meth:`~generaldomo.io.bridge.Bridge.stop` raise it.

    Example::

        bridge = Bridge(["tcp://127.0.0.1:*"], "tcp://127.0.0.1:5555").start()
        try:
            bridge.join()
        except BridgeFailed as error:
            log.error("the bridge stopped: %r", error.__cause__)
    """


class TooManyStreams(GeneraldomoError, RuntimeError):
    """The dashboard's event streams are at their cap, in all or from this client (the page gets a 503).

    Example::

        try:
            stream = feed.open_stream("127.0.0.1")
        except TooManyStreams as error:  # "8 event streams are open from 127.0.0.1, the most"
            print(error)
    """


class CodecError(GeneraldomoError, ValueError):
    """The bytes are not a well-formed sequence of length-prefixed frames (a CLIENT or SERVER message part).

    Example::

        try:
            frames = codec.decode(part)
        except CodecError:  # truncated or malformed: the peer's message is dropped
            ...
    """


class TooManyFrames(CodecError):
    """The bytes hold more frames than the decoder was allowed to unpack.

    Example::

        try:
            frames = codec.decode(part, max_frames=64)
        except TooManyFrames:  # refused without unpacking the rest
            ...
    """


class WireJSONError(GeneraldomoError, ValueError):
    """JSON text from a peer that is malformed or outside the bounds (size, depth, numbers).

    Example::

        try:
            limits = wirejson.loads(b'{"rate": NaN}')
        except WireJSONError as error:  # JSON numbers must be finite, not NaN
            print(error)
    """


class IllegalTransition(GeneraldomoError, RuntimeError):
    """A state machine was told an event its table has no move for in its state (a bug of generaldomo's).

    Args:
        machine: the machine's name.
        state: the state it was in.
        event: the event it has no move for.

    Example::

        try:
            LIGHT.step("on", "pull")
        except IllegalTransition as error:
            print(error)  # light: no move for pull in state on
    """

    def __init__(self, machine: str, state: object, event: object) -> None:
        super().__init__(f"{machine}: no move for {_named(event)} in state {_named(state)}")
        self.machine, self.state, self.event = machine, state, event


def _named(value: object) -> str:
    """A state's or event's name in messages: an enum member's name, else its str."""
    return getattr(value, "name", None) or str(value)


class ManagementError(GeneraldomoError, ValueError):
    """A management request (``mmi.*``) the broker cannot act on; its text goes back to the client (status 400).

    Example::

        try:
            client.request("mmi.flow", b"not json", timeout=10)
        except RequestRejected as error:  # the broker's ManagementError, as the client sees it
            print(error.status)  # 400
    """

    status: ClassVar[bytes] = b"400"  # the protocol's BAD_REQUEST


class Forbidden(ManagementError):
    """A management request the sender's role does not allow (status 403).

    Example::

        try:
            client.request("mmi.flow", b'echo {"rate": 10}', timeout=10)  # without the admin role
        except RequestRejected as error:  # the broker's Forbidden, as the client sees it
            print(error.status)  # 403
    """

    status: ClassVar[bytes] = b"403"  # the protocol's FORBIDDEN


class OverBudget(ManagementError):
    """A management request whose change does not fit the broker's budgets (status 429).

    Example::

        try:
            client.request("mmi.flow", b'echo {"rate": 10}', timeout=10)  # no room for more flow limits
        except RequestRejected as error:  # the broker's OverBudget, as the client sees it
            print(error.status)  # 429
    """

    status: ClassVar[bytes] = b"429"  # the protocol's OVER_BUDGET
