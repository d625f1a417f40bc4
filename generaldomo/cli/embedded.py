"""The broker command inside a C++ program: ``generaldomo::EmbeddedBroker`` (``cpp/include/generaldomo/embedded.hpp``).

This module owns what the C++ class asks of Python: the broker's settings given as ``(key, value)`` pairs or a
configuration file turned into the ``generaldomo broker`` command's own flags (parsed by that command's parser,
so every flag, default and check is the command line's), a broker built from them on the application's ZeroMQ
context (``zmq.Context.shadow`` of the context pointer the C++ code made), served in the calling thread until
:meth:`EmbeddedBroker.stop`, which serves what the broker holds for a while and then fails what is left (none is
lost). It also prints the compiler and linker flags of such a program (``python -m generaldomo.cli.embedded``).

A key is a flag's name without its dashes (``server``, ``flow``, ``max-message``; ``_`` may stand for ``-``); a
key given several times gives the flag several times; a flag that takes no value (``beacon``) takes ``true`` or
``false``. A configuration file has one ``key = value`` (or ``key value``) per line; blank lines and lines
starting with ``#`` are ignored; pairs given with it come after its lines. ``verbose`` (0, 1 or 2) sets the
level of Python's log messages as ``-v`` does on the command line.

It knows nothing of C++ beyond the context pointer, and decides nothing the broker command does not.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shlex
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import zmq

from generaldomo import cpp, errors
from generaldomo.cli import broker as command
from generaldomo.cli.config import CONFIG_FILE
from generaldomo.compat import moved_names
from generaldomo.io import files
from generaldomo.io.broker import Broker

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["SettingsError"])

__all__ = ["DRAIN", "BuildFlags", "EmbeddedBroker", "build_flags", "flags", "main", "parser", "read_config"]

log = logging.getLogger(__name__)

DRAIN = 10.0  # seconds a stop serves the requests the broker holds before failing the rest
TRUE, FALSE = ("true", "1", "yes", "on", ""), ("false", "0", "no", "off")


class _Parser(argparse.ArgumentParser):
    """The broker command's parser, raising instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise errors.SettingsError(message)


def parser() -> argparse.ArgumentParser:
    """The parser of the embedded broker's flags: the broker command's, and ``--verbose``."""
    parsed = _Parser(prog="generaldomo::EmbeddedBroker", add_help=False, allow_abbrev=False)
    command.arguments(parsed)
    parsed.add_argument("-v", "--verbose", type=int, default=0, choices=(0, 1, 2))
    return parsed


def read_config(path: str | Path) -> list[tuple[str, str]]:
    """The ``(key, value)`` pairs of a configuration file (see the module docstring)."""
    pairs = []
    try:
        text = files.read(path, CONFIG_FILE).decode("utf-8")
    except OSError as error:
        raise errors.SettingsError(f"cannot read the configuration file {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise errors.SettingsError(f"{path}: not a configuration file (not UTF-8 text)") from None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, _, value = line.partition(" ")
        if not key.strip():
            raise errors.SettingsError(f"{path}:{number}: no key in {raw!r}")
        pairs.append((key.strip(), value.strip()))
    return pairs


def flags(pairs: Iterable[tuple[str, str]], parsing: argparse.ArgumentParser | None = None) -> list[str]:
    """The command-line flags that ``(key, value)`` pairs stand for (checked against ``parsing``'s flags)."""
    parsing = parsing or parser()
    takes_no_value = {
        option: action.nargs == 0 for action in parsing._actions for option in action.option_strings
    }  # argparse keeps its actions there; it has no public listing of them
    argv: list[str] = []
    for key, value in pairs:
        option = "--" + key.strip().lstrip("-").replace("_", "-")
        if option not in takes_no_value:
            raise errors.SettingsError(f"unknown broker setting {key!r} (the broker command has no {option})")
        if not takes_no_value[option]:
            argv += [option, value]
        elif value.strip().lower() in TRUE:
            argv.append(option)
        elif value.strip().lower() not in FALSE:
            raise errors.SettingsError(f"broker setting {key!r} is true or false, not {value!r}")
    return argv


class EmbeddedBroker:
    """A broker built from settings on the ZeroMQ context at address ``context`` (a ``void *`` made by the
    application's libzmq, which must be the one pyzmq uses), bound at once; :meth:`run` serves it."""

    def __init__(self, context: int, settings: Sequence[tuple[str, str]] = (), config: str | None = None) -> None:
        parsing = parser()
        pairs = [*(read_config(config) if config else []), *settings]
        args = parsing.parse_args(flags(pairs, parsing))
        if args.verbose:
            logging.basicConfig(
                level=logging.DEBUG if args.verbose > 1 else logging.INFO,
                format="%(asctime)s %(name)s %(levelname)s %(message)s",
            )
        self.context: zmq.Context[Any] = zmq.Context.shadow(context)
        self.broker: Broker = command.make_broker(args, self.context)
        self._cleanup = contextlib.ExitStack()
        try:
            command.announce(self.broker, args, self._cleanup, log.info)
        except BaseException:
            self._cleanup.close()
            self.broker.stop()
            raise

    @property
    def endpoints(self) -> list[tuple[str, str]]:
        """Every bound endpoint as ``(transport, endpoint)``, with the ports that ``*`` binds received."""
        return self.broker.endpoints

    def run(self) -> None:
        """Serve in the calling thread until :meth:`stop` (the GIL is released while the loop waits)."""
        with self._cleanup:
            self.broker.run()

    def stop(self, drain: float = DRAIN) -> None:
        """Make :meth:`run` return, without waiting: once the requests the broker holds are answered, or after
        ``drain`` seconds, answering those still unanswered ``503``; new requests meanwhile get ``503``."""
        self.broker.request_stop(drain)


class BuildFlags(NamedTuple):
    """The compiler and linker flags of a C++ program using ``embedded.hpp`` with this interpreter."""

    include: list[str]  # generaldomo's C++ headers, libzmq's and Python's
    libzmq: list[str]  # pyzmq's own extension module, which carries the libzmq that both sides must use
    python: list[str]  # libpython

    @property
    def libs(self) -> list[str]:
        return [*self.libzmq, *self.python]


def build_flags(libzmq_prefix: Path) -> BuildFlags:
    """The flags for this interpreter, with libzmq's headers from ``libzmq_prefix`` (the draft build's)."""
    from zmq.backend.cython import _zmq  # libzmq is linked into this extension (pyzmq >= 26)

    extension = Path(_zmq.__file__).resolve()
    config = sysconfig.get_config_var
    include = [f"-I{cpp.include_dir()}", f"-I{libzmq_prefix / 'include'}", f"-I{sysconfig.get_path('include')}"]
    libdir, version = config("LIBDIR"), config("LDVERSION")
    if config("Py_ENABLE_SHARED"):
        python = [f"-L{libdir}", f"-lpython{version}", f"-Wl,-rpath,{libdir}"]
    else:  # a static libpython: extension modules find its symbols in the program
        python = [f"-L{config('LIBPL')}", f"-lpython{version}", *shlex.split(config("LINKFORSHARED") or "")]
    python += [*shlex.split(config("LIBS") or ""), *shlex.split(config("SYSLIBS") or ""), "-ldl"]
    return BuildFlags(include, [str(extension), f"-Wl,-rpath,{extension.parent}"], python)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m generaldomo.cli.embedded [--cflags] [--libs]``: print the flags, like pkg-config."""
    from generaldomo import draft

    chosen = argparse.ArgumentParser(prog="python -m generaldomo.cli.embedded", description=build_flags.__doc__)
    chosen.add_argument("--cflags", action="store_true", help="the compiler flags")
    chosen.add_argument("--libs", action="store_true", help="the linker flags")
    args = chosen.parse_args(argv)
    try:
        found = build_flags(draft.libzmq_prefix())
    except (draft.BuildError, ImportError, OSError) as error:
        print(f"generaldomo: {error}", file=sys.stderr)
        return 1
    both = args.cflags == args.libs
    shown = (found.include if args.cflags or both else []) + (found.libs if args.libs or both else [])
    print(shlex.join(shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
