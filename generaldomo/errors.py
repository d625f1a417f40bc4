"""The errors generaldomo raises at its users: one family under :class:`GeneraldomoError`.

Rules: every exception class generaldomo defines derives from :class:`GeneraldomoError`, so that
``except GeneraldomoError`` catches whatever the package raises, and keeps the standard base a caller would
catch without knowing generaldomo (``RequestTimeout`` is a ``TimeoutError``, ``HandshakeFailed`` a
``ConnectionError``, a bad description a ``ValueError``). Those a user may meet are defined here and import from
``generaldomo`` too (and from the module that raises them, as before); the few that never leave the package stay
beside their code (:mod:`generaldomo.sansio.wire.codec`, :mod:`generaldomo.sansio.broker.mmi`). Two exceptions are not
in the family, on purpose: :class:`generaldomo.Reject` is a handler's *answer* (the worker turns it into a status
for the client; no user catches it, and ``except GeneraldomoError`` in a handler must not swallow it), and the
draft builder's ``BuildError`` (:mod:`generaldomo.draft` imports only the standard library, to run from a source
tree).

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
    └── SettingsError                   (ValueError) an embedded broker's setting the broker command refuses

It imports nothing of generaldomo (every layer imports it) and knows nothing of sockets; the status codes the
families stand for are the protocol's (:mod:`generaldomo.sansio.wire.protocol`, tests/package/test_errors.py checks
they agree).
"""

from __future__ import annotations

from typing import ClassVar


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


class SettingsError(GeneraldomoError, ValueError):
    """A setting that the broker command does not take, or a value it refuses; the message says which.

    Example::

        try:
            EmbeddedBroker(context_address, [("no-such-flag", "1")])
        except SettingsError as error:  # the broker command has no --no-such-flag
            print(error)
    """
