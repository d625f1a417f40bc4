"""The errors generaldomo raises at its users: one family under :class:`GeneraldomoError`.

Rules: every exception class generaldomo defines derives from :class:`GeneraldomoError`, so that
``except GeneraldomoError`` catches whatever the package raises, and keeps the standard base a caller would
catch without knowing generaldomo (``RequestTimeout`` is a ``TimeoutError``, ``HandshakeFailed`` a
``ConnectionError``, a bad description a ``ValueError``). Those a user may meet are defined here and import from
``generaldomo`` too (and from the module that raises them, as before); the few that never leave the package stay
beside their code (:mod:`generaldomo.sansio.codec`, :mod:`generaldomo.sansio.mmi`). Two exceptions are not in
the family, on purpose: :class:`generaldomo.Reject` is a handler's *answer* (the worker turns it into a status
for the client; no user catches it, and ``except GeneraldomoError`` in a handler must not swallow it), and the
draft builder's ``BuildError`` (:mod:`generaldomo.draft` imports only the standard library, to run from a source
tree).

The family::

    GeneraldomoError
    ├── RequestFailed                   an error reply: .status (int), .status_bytes, .reason
    │   ├── RequestRejected             4xx: the broker refused the request
    │   ├── WorkerError                 500: the handler raised
    │   ├── ServiceUnavailable          503: the task's workers kept disappearing
    │   └── RequestExpired              504: its deadline passed (also a TimeoutError)
    ├── RequestTimeout                  (TimeoutError) no reply within the time
    ├── ClientClosed                    (RuntimeError) the client closed before the reply came
    ├── HandshakeFailed                 (ConnectionError) the broker refuses this peer's connection
    ├── WorkerStopped                   (RuntimeError) Worker.serve stopped by itself
    ├── DiscoveryError                  (LookupError) no broker found
    ├── DraftUnavailable                (RuntimeError) this pyzmq lacks CLIENT/SERVER sockets
    ├── ResolveError                    (ValueError) a description the resolver refuses
    ├── ContentTypeError, DecodeError   (ValueError) a typed payload of the wrong type, or undecodable
    ├── AppImportError                  (ImportError) a worker app's module raised while imported
    ├── KeyFileError                    (ValueError) a CURVE certificate file that cannot be used
    ├── StateError                      (ValueError) a broker state directory that cannot be used
    └── SettingsError                   (ValueError) an embedded broker's setting the broker command refuses

It knows nothing of sockets; the status codes are the protocol's (:mod:`generaldomo.sansio.protocol`).
"""

from __future__ import annotations

from generaldomo.sansio import protocol


class GeneraldomoError(Exception):
    """The base of every exception generaldomo raises (see the module docstring for the family)."""


class RequestFailed(GeneraldomoError):
    """The broker or the worker answered the request with an error status (``.status``, an int)."""

    def __init__(self, status: bytes | int, reason: str) -> None:
        self.status_bytes = status if isinstance(status, bytes) else str(status).encode()
        self.status = int(self.status_bytes) if self.status_bytes.isdigit() else 0
        self.reason = reason
        super().__init__(f"{self.status_bytes.decode(errors='replace')}: {reason}")

    @staticmethod
    def of(status: bytes, reason: str) -> RequestFailed:
        """The exception for ``status``: the subclass of its family, or this class for other codes."""
        family = _FAMILIES.get(status) or (RequestRejected if status[:1] == b"4" else RequestFailed)
        return family(status, reason)


class RequestRejected(RequestFailed):
    """4xx: the broker refused the request (bad description 400, forbidden 403, too large 413, over budget 429)."""


class WorkerError(RequestFailed):
    """500: the worker's handler raised, or returned something that cannot be sent."""


class ServiceUnavailable(RequestFailed):
    """503: the task could not be served (its workers kept disappearing: ``max_attempts`` reached)."""


class RequestExpired(RequestFailed, TimeoutError):
    """504: the request's deadline passed, or it waited in the broker's queue longer than its ``queue_timeout``.
    A ``TimeoutError`` too: a :meth:`Client.request` whose timeout (its deadline) the broker saw pass first
    raises this rather than :class:`RequestTimeout`."""


_FAMILIES: dict[bytes, type[RequestFailed]] = {
    protocol.WORKER_ERROR: WorkerError,
    protocol.UNAVAILABLE: ServiceUnavailable,
    protocol.EXPIRED: RequestExpired,
}


class ClientClosed(GeneraldomoError, RuntimeError):
    """The client was closed, or its IO thread stopped (``__cause__`` says why), before the request was answered."""


class RequestTimeout(GeneraldomoError, TimeoutError):
    """No reply within the time; the message says whether a broker ever answered at the endpoint."""


class HandshakeFailed(GeneraldomoError, ConnectionError):
    """The broker at the endpoint refused this peer's connection, which trying again will not fix: it speaks the
    other transport, or CURVE is missing, not wanted, or has the wrong key; ``.kind`` (``curve``, ``key``,
    ``handshake``: the other transport or CURVE, see :mod:`generaldomo.sansio.handshake`) and the message say
    which. Raised within about a second of the failed handshake."""

    def __init__(self, kind: str, cause: str) -> None:
        super().__init__(cause)
        self.kind = kind


class WorkerStopped(GeneraldomoError, RuntimeError):
    """:meth:`Worker.serve` stopped for a reason other than :meth:`Worker.stop` (``__cause__`` says which)."""


class DiscoveryError(GeneraldomoError, LookupError):
    """No broker was found."""


class DraftUnavailable(GeneraldomoError, RuntimeError):
    """The installed pyzmq/libzmq lacks the draft API that CLIENT and SERVER sockets need."""


class ResolveError(GeneraldomoError, ValueError):
    """A description the resolver cannot accept; the broker answers the client with an error."""


class ContentTypeError(GeneraldomoError, ValueError):
    """The payload's content type is not the one expected (``actual`` None: raw bytes, no content type)."""

    status = 415

    def __init__(self, expected: str | None, actual: str | None, what: str = "payload") -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(f"the {what} is {_kind(actual)} but {_kind(expected)} was expected")


def _kind(name: str | None) -> str:
    return "raw bytes (no content type)" if name is None else f"content type {name!r}"


class DecodeError(GeneraldomoError, ValueError):
    """The body could not be decoded by the serializer its content type names."""

    status = 400


class AppImportError(GeneraldomoError, ImportError):
    """The module of a ``module:attr`` spec raised while it was imported; the message carries its traceback
    (file, line and code of each frame of the user's module) and ``__cause__`` the exception."""


class KeyFileError(GeneraldomoError, ValueError):
    """A certificate file is missing, unreadable or lacks the key asked for."""


class StateError(GeneraldomoError, ValueError):
    """The state directory cannot be used: unreadable, malformed, or in use by another broker."""


class SettingsError(GeneraldomoError, ValueError):
    """A setting that the broker command does not take, or a value it refuses; the message says which."""
