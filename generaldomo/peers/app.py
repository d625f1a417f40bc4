"""Worker apps: several services declared on one object, and loading user code by ``module:attr``.

Rules:

- ``app = App("name")``; ``@app.service("fft")`` or ``@app.service({"service": "fft", "gpu": "a100"})``
  (a JSON description for the attributes resolver) declares a handler; ``serializer="json"`` (or
  ``msgpack``, ``pickle``, any :class:`~generaldomo.sansio.peer.serializers.Serializer`) makes it take and return
  Python objects. Without one it takes and returns bytes, as a plain :class:`~generaldomo.Worker` handler.
- A handler may be a function, a generator (each yield is a partial result), an ``async def`` or an async
  generator; the coroutines run on an event loop owned by the slot that serves them (:class:`Bound`). A
  handler with a second positional parameter without a default (``def fft(signal, task)``) also gets the
  task's :class:`~generaldomo.peers.task.TaskContext` (deadline, time left, cancelled).
- A request whose content type is not the handler's gets ``415``, one its serializer cannot decode ``400``,
  both naming the service; an exception in the handler gives ``500`` with its type and message.
- :func:`load` takes ``module:attr`` (``module`` alone means ``module:app``), like ``celery -A``: an
  :class:`App`, or a handler function, served under its ``__name__`` or a description given to
  :meth:`App.select` (as ``--service`` gives it).

It knows nothing of sockets, processes or threads: :mod:`generaldomo.peers.pool` runs apps.
"""

from __future__ import annotations

import asyncio
import contextvars
import difflib
import importlib
import inspect
import json
import os
import pkgutil
import sys
import traceback
from collections.abc import AsyncGenerator, Callable, Generator, Mapping, Sequence
from types import ModuleType
from typing import Any, TypeVar

import attrs

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.peers.reject import Reject
from generaldomo.peers.task import TaskContext, takes_task
from generaldomo.sansio.peer import serializers
from generaldomo.sansio.peer.serializers import Serializer

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["AppImportError", "AppSpecError"])

__all__ = ["App", "Bound", "Description", "ServiceSpec", "load", "wire_description"]

F = TypeVar("F", bound=Callable[..., Any])
Description = str | Mapping[str, Any]


@attrs.frozen(slots=True)
class ServiceSpec:
    """One declared service: its ``name`` (to select it), the ``description`` announced, the handler."""

    name: str
    description: bytes
    handler: Callable[..., Any]
    serializer: Serializer | None = None


def wire_description(description: Description | bytes) -> bytes:
    """A description as it travels: text as UTF-8, a mapping as compact JSON with sorted keys."""
    if isinstance(description, bytes):
        return description
    if isinstance(description, str):
        return description.encode()
    if not isinstance(description, Mapping):
        raise TypeError(f"a description is a str or a mapping, not {type(description).__name__}")
    return json.dumps(dict(description), sort_keys=True, separators=(",", ":")).encode()


def _describe(description: Description, handler: Callable[..., Any]) -> tuple[str, bytes]:
    if isinstance(description, str):
        return description, description.encode()
    name = description.get("service") if isinstance(description, Mapping) else None
    return (name if isinstance(name, str) else handler.__name__), wire_description(description)


class App:
    """A named set of services, each a handler with its description and optional serializer.

    Args:
        name: the app's name (in logs and ``generaldomo worker``'s output).

    Example::

        from generaldomo import App

        app = App("maths")

        @app.service("square", serializer="json")
        def square(numbers):
            return [n * n for n in numbers]

        # generaldomo worker mymodule:app --connect tcp://127.0.0.1:5555
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._services: dict[str, ServiceSpec] = {}
        self.from_handler = False

    @classmethod
    def of(cls, handler: Callable[..., Any], description: Description | None = None) -> App:
        """A one-service app: ``handler`` under ``description`` (default: the handler's ``__name__``)."""
        app = cls(getattr(handler, "__module__", None) or "handler")
        app.add(description or handler.__name__, handler)
        app.from_handler = True
        return app

    def service(self, description: Description, *, serializer: str | Serializer | None = None) -> Callable[[F], F]:
        """Decorator: serve the function under ``description``; the function itself is returned unchanged.

        Args:
            description: a service name, or a mapping sent as JSON (for the ``attributes`` resolver).
            serializer: how values travel (``json``, ``msgpack``, ``pickle`` or a Serializer); None: bytes.
        """

        def declare(handler: F) -> F:
            self.add(description, handler, serializer=serializer)
            return handler

        return declare

    def add(
        self, description: Description, handler: Callable[..., Any], *, serializer: str | Serializer | None = None
    ) -> ServiceSpec:
        """Declare a service without the decorator.

        Args:
            description: as for :meth:`service`.
            handler: the function (or generator, coroutine, async generator) that serves it.
            serializer: as for :meth:`service`.
        """
        name, wire = _describe(description, handler)
        if name in self._services:
            raise ValueError(f"app {self.name!r} already has a service named {name!r}")
        spec = ServiceSpec(name, wire, handler, None if serializer is None else serializers.get(serializer))
        self._services[name] = spec
        return spec

    @property
    def services(self) -> tuple[ServiceSpec, ...]:
        """The declared services, in declaration order."""
        return tuple(self._services.values())

    def select(self, names: Sequence[str] | None) -> tuple[ServiceSpec, ...]:
        """The named services (all when ``names`` is None or empty); raises :class:`AppSpecError` naming the choices.

        Of a one-service app made by :meth:`of`, one name is the description to serve the handler under."""
        if not names:
            return self.services
        if self.from_handler:
            if len(names) != 1:
                raise errors.AppSpecError(f"a handler function serves one description, not {list(names)!r}")
            return App.of(self.services[0].handler, names[0]).services
        unknown = [name for name in names if name not in self._services]
        if unknown:
            hint = _nearest(unknown[0], list(self._services))
            raise errors.AppSpecError(
                f"app {self.name!r} has no service {unknown[0]!r} (it has {list(self._services)!r}){hint}"
            )
        return tuple(self._services[name] for name in names)

    def __repr__(self) -> str:
        return f"App({self.name!r}, services={list(self._services)!r})"


def load(spec: str) -> App:
    """The app ``module:attr`` names (``module`` alone: its ``app``); a function becomes a one-service app.

    The current directory is importable first, as for ``celery -A`` and ``rq worker``."""
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise ValueError(f"not a module:attr spec: {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = _import(module_name, spec)  # first alone, so that its failures are told as the user's code's
    try:
        target = pkgutil.resolve_name(f"{module_name}:{attr or 'app'}")
    except AttributeError:
        name = attr or "app"
        apps = [key for key, value in vars(module).items() if isinstance(value, App)]
        hint = _nearest(name.rpartition(".")[2], apps) or _nearest(name.rpartition(".")[2], _public(module))
        raise errors.AppSpecError(f"{module_name!r} has no attribute {name!r} (from {spec!r}){hint}") from None
    if isinstance(target, App):
        return target
    if callable(target):
        return App.of(target)
    raise TypeError(f"{spec!r} is a {type(target).__name__}, not an App or a handler function")


def _nearest(name: str, names: Sequence[str]) -> str:
    """``; did you mean 'x'?`` for the name of ``names`` nearest ``name``, or nothing when none is near."""
    close = difflib.get_close_matches(name, names, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _public(module: ModuleType) -> list[str]:
    """The names a spec could mean in ``module``: its public callables (handler functions, apps are above)."""
    return [key for key, value in vars(module).items() if not key.startswith("_") and callable(value)]


def _siblings(missing: str) -> list[str]:
    """The modules that could have been meant by the missing dotted name ``missing``: its package's."""
    parent, _, _ = missing.rpartition(".")
    if not parent:
        return [found.name for found in pkgutil.iter_modules([os.getcwd()])]
    try:
        package = importlib.import_module(parent)
    except ImportError:
        return []
    return [f"{parent}.{found.name}" for found in pkgutil.iter_modules(getattr(package, "__path__", []))]


def _import(module_name: str, spec: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and module_name.startswith(error.name):  # the spec's module itself is missing
            hint = _nearest(error.name, _siblings(error.name))
            raise ModuleNotFoundError(
                f"no module named {error.name!r} (from {spec!r}; looked in the current folder, {os.getcwd()}, "
                f"and sys.path){hint}",
                name=error.name,
            ) from None
        raise errors.AppImportError(_failed(module_name, spec, error)) from error
    except Exception as error:  # anything the user's module raises while it runs
        raise errors.AppImportError(_failed(module_name, spec, error)) from error


def _failed(module_name: str, spec: str, error: BaseException) -> str:
    """A message with the traceback of ``error`` from the frames of the imported code (importlib's left out)."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if frame.filename not in (__file__, importlib.__file__) and not frame.filename.startswith("<frozen importlib")
    ]
    lines = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(error))
    return f"importing {module_name!r} (from {spec!r}) failed:\nTraceback (most recent call last):\n{lines}".rstrip()


class Bound:
    """A service's handler as a bytes-level :class:`~generaldomo.Worker` handler, with its own event loop.

    Decodes the request, calls the handler (running coroutines on this object's loop), encodes the result;
    :meth:`close` closes the loop. One task at a time: a slot owns one."""

    takes_task = True  # the Worker passes the task's context; the handler gets it if it asks (takes_task)

    def __init__(self, service: ServiceSpec) -> None:
        self.service = service
        self._runner: asyncio.Runner | None = None
        self._pass_task = takes_task(service.handler)

    def __call__(self, payload: bytes | tuple[bytes, ...], task: TaskContext | None = None) -> Any:
        argument = self._argument(payload)
        handler = self.service.handler
        result = handler(argument, task) if self._pass_task else handler(argument)
        if inspect.isawaitable(result):
            # in this thread's context now (a handler's span, say), not the one the loop was made in
            result = self._loop().run(_awaited(result), context=contextvars.copy_context())
        if isinstance(result, AsyncGenerator):
            result = self._drive(result)
        if isinstance(result, Generator):
            return self._encode_stream(result)
        return self._encode(result)

    def close(self) -> None:
        """Close the event loop, if one was made."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def _loop(self) -> asyncio.Runner:
        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner

    def _argument(self, payload: bytes | tuple[bytes, ...]) -> Any:
        frames = (payload,) if isinstance(payload, bytes) else payload
        serializer = self.service.serializer
        if serializer is None:
            if (sent := serializers.content_type(frames)) is not None:
                raise Reject(415, f"service {self.service.name!r} takes raw bytes but the request is {sent!r}")
            return payload
        try:
            return serializers.decode(serializer, frames, "request")
        except (errors.ContentTypeError, errors.DecodeError) as error:
            raise Reject(error.status, f"service {self.service.name!r}: {error}") from None

    def _encode(self, value: Any) -> Any:
        serializer = self.service.serializer
        return value if serializer is None else serializers.encode(serializer, value)

    def _encode_stream(self, parts: Generator[Any, Any, Any]) -> Generator[Any, None, Any]:
        while True:
            try:
                part = next(parts)
            except StopIteration as done:
                return self._encode(done.value)
            yield self._encode(part)

    def _drive(self, parts: AsyncGenerator[Any, Any]) -> Generator[Any, None, None]:
        """An async generator as a generator: each step runs on this object's loop."""
        loop, context = self._loop(), contextvars.copy_context()
        try:
            while True:
                try:
                    yield loop.run(_next(parts), context=context)
                except StopAsyncIteration:
                    return
        finally:
            loop.run(parts.aclose())


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


async def _next(parts: AsyncGenerator[Any, Any]) -> Any:
    return await parts.__anext__()
