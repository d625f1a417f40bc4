"""One error family, one home: every exception generaldomo defines is a GeneraldomoError defined in
generaldomo.errors, with the stdlib base users catch, exported from generaldomo and documented; importable from
where it was defined before, with a DeprecationWarning; AsyncClient raises what Client raises, case by case, over
real sockets."""

from __future__ import annotations

import ast
import asyncio
import importlib
import sys
import threading
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import generaldomo
from generaldomo import AsyncClient, Client, GeneraldomoError, Reject, Settings, TypedClient, errors
from generaldomo.peers.app import App, Bound
from generaldomo.sansio.wire import protocol

PACKAGE = Path(generaldomo.__file__).parent
OUTSIDE = {"generaldomo.peers.reject.Reject", "generaldomo.draft.BuildError", "generaldomo.draft.Unsupported"}
# In the family and exported, but defined beside its code: a zmq.ZMQError too, and errors.py imports no pyzmq.
BESIDE = {"generaldomo.io.transport.BindError"}
# The standard base each public exception keeps, so that code written without generaldomo in mind catches it.
STDLIB_BASES = {
    "RequestFailed": Exception,
    "RequestExpired": TimeoutError,
    "RequestTimeout": TimeoutError,
    "ClientClosed": RuntimeError,
    "HandshakeFailed": ConnectionError,
    "BrokerUnreachable": ConnectionError,
    "WorkerStopped": RuntimeError,
    "DiscoveryError": LookupError,
    "DraftUnavailable": RuntimeError,
    "ResolveError": ValueError,
    "ContentTypeError": ValueError,
    "DecodeError": ValueError,
    "AppImportError": ImportError,
    "AppSpecError": LookupError,
    "KeyFileError": ValueError,
    "StateError": ValueError,
    "PairBroken": RuntimeError,
    "SettingsError": ValueError,
    "LoopFailed": RuntimeError,
    "BrokerFailed": RuntimeError,
    "BridgeFailed": RuntimeError,
    "TooManyStreams": RuntimeError,
    "CodecError": ValueError,
    "TooManyFrames": ValueError,
    "WireJSONError": ValueError,
    "ManagementError": ValueError,
    "Forbidden": ValueError,
    "OverBudget": ValueError,
    "IllegalTransition": RuntimeError,
}
# Where each was defined (or imported from) before generaldomo.errors: still importable from there, with a
# DeprecationWarning.
OLD_HOMES = {
    "generaldomo.peers.client": ("RequestFailed", "RequestRejected", "WorkerError", "ServiceUnavailable",
                                 "RequestExpired", "ClientClosed", "RequestTimeout", "HandshakeFailed",
                                 "NotFound", "BrokerUnreachable"),
    "generaldomo.peers.worker": ("WorkerStopped",),
    "generaldomo.peers.app": ("AppImportError", "AppSpecError"),
    "generaldomo.io.beacon": ("DiscoveryError",),
    "generaldomo.io.transport": ("DraftUnavailable",),
    "generaldomo.io.keys": ("KeyFileError",),
    "generaldomo.io.hub.state": ("StateError",),
    "generaldomo.sansio.broker.services.resolver": ("ResolveError",),
    "generaldomo.sansio.peer.serializers": ("ContentTypeError", "DecodeError"),
    "generaldomo.cli.embedded": ("SettingsError",),
    "generaldomo.sansio.wire.codec": ("CodecError", "TooManyFrames"),
    "generaldomo.sansio.wire.wirejson": ("WireJSONError",),
    "generaldomo.sansio.machine": ("IllegalTransition",),
    "generaldomo.sansio.broker.mmi": ("ManagementError", "Forbidden", "OverBudget"),
    "generaldomo.io.failfast": ("LoopFailed",),
    "generaldomo.io.broker": ("BrokerFailed",),
    "generaldomo.io.bridge": ("BridgeFailed",),
    "generaldomo.dashboard.feed": ("TooManyStreams",),
}  # fmt: skip


def defined_classes() -> list[str]:
    """``module.Class`` of every class at the top level of a generaldomo module."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text())
        found += [f"{module}.{node.name}" for node in tree.body if isinstance(node, ast.ClassDef) and node.bases]
    return found


def test_every_exception_generaldomo_defines_is_in_the_family() -> None:
    outside = []
    exceptions = 0
    for qualified in defined_classes():
        module, name = qualified.rsplit(".", 1)
        cls = getattr(importlib.import_module(module), name)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            exceptions += 1
            if not issubclass(cls, GeneraldomoError) and qualified not in OUTSIDE:
                outside.append(qualified)
    assert exceptions >= 25
    assert not outside, f"derive these from generaldomo.errors.GeneraldomoError (keeping their stdlib base): {outside}"


def test_the_exceptions_outside_the_family_are_the_handler_s_answer_and_the_builder_s() -> None:
    assert not issubclass(Reject, GeneraldomoError)
    assert not issubclass(importlib.import_module("generaldomo.draft").BuildError, GeneraldomoError)


@pytest.mark.parametrize("name", sorted(STDLIB_BASES))
def test_each_keeps_its_stdlib_base_and_imports_from_generaldomo(name: str) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, GeneraldomoError) and issubclass(cls, STDLIB_BASES[name])
    assert getattr(generaldomo, name) is cls and name in generaldomo.__all__


@pytest.mark.parametrize("module", sorted(OLD_HOMES))
def test_each_still_imports_from_its_old_module(module: str) -> None:
    for name in OLD_HOMES[module]:
        with pytest.warns(DeprecationWarning, match=rf"\.{name} is deprecated; import it from generaldomo"):
            assert getattr(importlib.import_module(module), name) is getattr(errors, name)
        assert name not in vars(importlib.import_module(module)), f"{module} holds {name}: use errors.{name} there"


def test_an_old_path_warns_in_every_form_of_import_and_gives_the_same_class() -> None:
    namespace: dict[str, Any] = {}
    with pytest.warns(DeprecationWarning, match="generaldomo.peers.worker.WorkerStopped is deprecated"):
        exec("from generaldomo.peers.worker import WorkerStopped", namespace)
    assert namespace["WorkerStopped"] is errors.WorkerStopped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert generaldomo.WorkerStopped is errors.WorkerStopped  # its home and the package: no warning
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchError'"):
        importlib.import_module("generaldomo.peers.worker").NoSuchError  # noqa: B018


def exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class generaldomo defines, by the ``module.Class`` that defines it."""
    found = {}
    for qualified in defined_classes():
        module, name = qualified.rsplit(".", 1)
        cls = vars(importlib.import_module(module)).get(name)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found[qualified] = cls
    return found


def test_every_exception_is_defined_in_errors_py_exported_and_documented() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "_ext"))
    try:
        import apicheck
    finally:
        sys.path.pop(0)
    documented = {name for module, name, _ in apicheck.public() if module == "generaldomo"}
    elsewhere, unexported, undocumented = [], [], []
    for qualified, cls in exception_classes().items():
        if qualified in OUTSIDE:
            continue
        name = qualified.rsplit(".", 1)[1]
        if not qualified.startswith("generaldomo.errors.") and qualified not in BESIDE:
            elsewhere.append(qualified)
        if getattr(generaldomo, name, None) is not cls or name not in generaldomo.__all__:
            unexported.append(name)
        if name not in documented:
            undocumented.append(name)
    assert not elsewhere, f"define these in generaldomo/errors.py (the old module gets compat.moved_names): {elsewhere}"
    assert not unexported, f"import these in generaldomo/__init__.py and add them to its __all__: {unexported}"
    assert not undocumented, f"these have no page in the API reference: {undocumented}"
    assert len([q for q in exception_classes() if q.startswith("generaldomo.errors.")]) >= 33


def test_the_management_errors_answer_the_protocol_s_statuses() -> None:
    assert errors.ManagementError.status == protocol.BAD_REQUEST
    assert errors.Forbidden.status == protocol.FORBIDDEN
    assert errors.OverBudget.status == protocol.OVER_BUDGET
    for family in (errors.NotFound, errors.WorkerError, errors.ServiceUnavailable, errors.RequestExpired):
        assert errors.RequestFailed.of(family.code, "why").__class__ is family


def test_request_failed_gives_the_family_of_each_status() -> None:
    kinds = {protocol.BAD_REQUEST: "RequestRejected", protocol.FORBIDDEN: "RequestRejected", b"429": "RequestRejected"}
    kinds |= {protocol.WORKER_ERROR: "WorkerError", protocol.UNAVAILABLE: "ServiceUnavailable"}
    kinds |= {protocol.EXPIRED: "RequestExpired", protocol.NOT_FOUND: "NotFound", b"501": "RequestFailed"}
    for status, name in kinds.items():
        error = errors.RequestFailed.of(status, "why")
        assert type(error).__name__ == name and error.status == int(status) and error.reason == "why"
    odd = errors.RequestFailed.of(b"5000", "why")  # not 3 digits, as no status is on the wire: 0, and its bytes
    assert type(odd) is errors.RequestFailed and odd.status == 0 and odd.status_bytes == b"5000"


# ------------------------------------------------------------------ AsyncClient raises what Client raises

HOLD = threading.Event()  # the "stuck" service answers once it is set (at the end of each test)
QUEUE_TIMEOUT = 0.5  # the broker's: a request to a service without workers is answered 504 after this long


def failing(payload: bytes) -> bytes:
    raise KeyError("no such thing")


def rejecting(payload: bytes) -> bytes:
    raise Reject(int(payload), "as asked")


def raw(payload: object) -> bytes:
    return b"not json"


def stuck(payload: bytes) -> bytes:
    HOLD.wait(60)
    return payload


streams = App("error-streams")


@streams.service("trickle")
def trickle(payload: bytes) -> Any:
    yield b"first"
    HOLD.wait(60)
    return b"last"


# case: (what the call is, Client options, the service it asks, its payload, its timeout, a serializer)
CASES: dict[str, tuple[str, dict[str, Any], str, Any, float, str | None]] = {
    "RequestTimeout": ("request", {"deadlines": False}, "stuck", b"x", 0.3, None),
    "RequestTimeout-no-broker": ("request", {"fail_unreachable": False}, "echo", b"x", 0.3, None),
    "BrokerUnreachable": ("request", {}, "echo", b"x", 30, None),
    "RequestTimeout-stream-gap": ("stream", {}, "trickle", b"x", 0.5, None),
    "WorkerError": ("request", {}, "failing", b"x", 30, None),
    "RequestRejected": ("request", {}, "rejecting", b"409", 30, None),
    "ServiceUnavailable": ("request", {}, "rejecting", b"503", 30, None),
    "RequestExpired": ("request", {}, "nobody-serves-this", b"x", 30, None),
    "ClientClosed": ("request", {}, "stuck", b"x", 30, None),
    "HandshakeFailed": ("request", {"transport": "server"}, "echo", b"x", 30, None),
    "ContentTypeError": ("request", {}, "raw", "x", 30, "json"),
}


def call_sync(client: Client, kind: str, service: str, payload: bytes, timeout: float, serializer: str | None) -> Any:
    if kind == "stream":
        return list(client.stream(service, payload, timeout))
    if serializer is not None:
        return TypedClient(client, serializer).request(service, payload, timeout)
    return client.request(service, payload, timeout)


async def call_async(client: Client, kind: str, service: str, payload: bytes, timeout: float, serializer: str | None):
    aio = AsyncClient(client, serializer=serializer)
    if kind == "stream":
        return [part async for part in aio.stream(service, payload, timeout)]
    return await aio.request(service, payload, timeout)


def raised(run: Callable[[], Any], closing: Client | None) -> BaseException:
    """What ``run()`` raises; ``closing`` is closed 0.5 s into the call."""
    timer = threading.Timer(0.5, closing.close) if closing is not None else None
    if timer is not None:
        timer.start()
    try:
        with pytest.raises(GeneraldomoError) as caught:
            run()
        return caught.value
    finally:
        if timer is not None:
            timer.join()


@pytest.mark.parametrize("case", sorted(CASES))
def test_async_client_raises_what_client_raises(case: str, brokers, workers, tmp_path: Path) -> None:
    kind, options, service, payload, timeout, serializer = CASES[case]
    HOLD.clear()
    broker = brokers("router", ["tcp://127.0.0.1:*"], settings=Settings(queue_timeout=QUEUE_TIMEOUT))
    served = broker.endpoint("router", "tcp")
    for name, handler in {"failing": failing, "rejecting": rejecting, "raw": raw, "stuck": stuck}.items():
        workers(served, "router", name, handler)
    workers(served, "router", "echo")
    workers(served, "router", "trickle", Bound(streams.services[0]))
    nobody = case in ("RequestTimeout-no-broker", "BrokerUnreachable")
    endpoint = f"ipc://{tmp_path}/nobody.sock" if nobody else served
    found = []
    try:
        for style in ("Client", "AsyncClient"):
            client = Client(
                endpoint, options.get("transport", "router"), deadlines=options.get("deadlines", True),
                fail_unreachable=options.get("fail_unreachable", True),
            )  # fmt: skip
            closing = client if case == "ClientClosed" else None
            with client:
                args = (client, kind, service, payload, timeout, serializer)
                if style == "Client":
                    found.append(raised(partial(call_sync, *args), closing))
                else:  # one event loop per call, as an application's asyncio.run
                    found.append(raised(partial(asyncio.run, call_async(*args)), closing))
    finally:
        HOLD.set()
    sync, in_loop = found
    assert type(sync).__name__ == case.split("-")[0], repr(sync)
    assert type(in_loop) is type(sync), f"Client raised {sync!r}, AsyncClient {in_loop!r}"
    if case.startswith("RequestTimeout"):
        assert str(in_loop).split(";")[0] == str(sync).split(";")[0]  # the same words (and the same diagnosis)
