"""``generaldomo client``: send one request, print the reply's frames one a line.

This module owns the client command's flags, its output and its exit status. The payload comes from the
command line (one frame per argument), from files or stdin (``--file``), or, with ``--json`` or
``--serializer NAME``, is one value (JSON text) for a typed service, whose reply is printed as JSON. Partial
results are printed as they arrive. A request for a service the broker knows nobody serves (no worker now, none
recently) fails at once with the broker's ``404`` (which lists the services that have workers and the nearest
name), unless ``--wait-for-service``. ``--no-wait`` sends a *detached* request, prints its id once the broker
has it and exits; ``--fetch ID`` prints the answer to such a request (or any, by its id). A refused handshake
(the other transport, CURVE missing or wrong) is reported as soon as the socket monitor sees it. When no reply
comes within ``--timeout``, it finds out why (see :mod:`generaldomo.cli.probe`, at most ``PROBE_TIMEOUT``
seconds more per question) and says so, with an exit
status of its own: nothing answers at the endpoint over this transport (and whether something does over the
other one); no worker serves the service (with the services that have workers, and the nearest name); or the
broker is alive and has workers, so the request is queued or running. The request itself goes through
:class:`generaldomo.peers.client.Client`, which withdraws it (CANCEL) when ``--timeout`` passes or on Ctrl-C,
so an abandoned request never runs later.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import generaldomo.errors as errors
from generaldomo.cli import options, probe
from generaldomo.cli.command import Command, Exit
from generaldomo.errors import HandshakeFailed, NotFound, RequestFailed
from generaldomo.io import files
from generaldomo.io.peer.connection import Curve
from generaldomo.peers.client import Client, Reply
from generaldomo.peers.reply import RequestFuture
from generaldomo.sansio.config import knobs
from generaldomo.sansio.peer import serializers
from generaldomo.sansio.peer.serializers import Serializer

__all__ = ["COMMAND", "DESCRIPTION", "PAYLOAD_FILE", "PROBE_TIMEOUT", "STDIN", "arguments", "payload_frames", "run"]

PROBE_TIMEOUT = probe.TIMEOUT  # seconds per diagnostic question after a timeout
STDIN = "-"
PAYLOAD_FILE = files.FileKind("payload file", 1 << 31)  # larger than any message a broker takes by default


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    options.connect(parser)
    options.wait_for_broker(parser)
    options.timeout(parser, "the reply")
    options.heartbeats(parser, "the broker")
    options.curve(parser)
    typed = parser.add_mutually_exclusive_group()
    typed.add_argument(
        "--json",
        dest="serializer",
        action="store_const",
        const="json",
        help="the payload is one JSON value, sent with the json serializer; print the reply as JSON",
    )
    typed.add_argument(
        "--serializer",
        metavar="NAME",
        choices=serializers.names(),
        help="the payload is one JSON value, sent with this serializer (json, msgpack, pickle); print the reply "
        "as JSON (default: raw bytes)",
    )
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help=f"read a payload frame from PATH ({STDIN}: stdin), after the frames on the command line "
        "(repeatable; default: none)",
    )
    parser.add_argument(
        "--wait-for-service",
        dest="fail_unknown",
        action="store_false",
        help="queue the request even if the broker has no worker for the service and had none recently (default: "
        "fail at once with 404, the services that have workers and the nearest name)",
    )
    later = parser.add_mutually_exclusive_group()
    options.add_knob(later, knobs.COMMANDS["delay"], default=0.0, help=knobs.COMMANDS["delay"].help + " (default: 0)")
    later.add_argument(
        "--not-before",
        metavar="TIME",
        type=_not_before,
        help="the broker dispatches the request no earlier than TIME: ISO 8601 with a time zone "
        "(2026-12-24T18:00:00+01:00, or Z for UTC) or seconds since the epoch (default: at once)",
    )
    handle = parser.add_mutually_exclusive_group()
    handle.add_argument(
        "--no-wait",
        action="store_true",
        help="send the request detached (the broker keeps it while this client is gone), print its id once the "
        "broker has it, and exit; get the answer later with --fetch ID",
    )
    handle.add_argument(
        "--fetch",
        metavar="ID",
        type=_request_id,
        help="print the answer to the request with this id (from --no-wait, or Future.request_id), waiting for it "
        "up to --timeout while it is queued or running; no service or payload then (default: send a request)",
    )
    parser.add_argument("service", nargs="?", help="request description (a service name with the default resolver)")
    parser.add_argument("payload", nargs="*", help="payload frames (UTF-8; default: one empty frame)")


def payload_frames(args: argparse.Namespace) -> list[bytes]:
    """The frames the arguments and ``--file`` give, in that order."""
    frames = [p.encode() for p in args.payload]
    for path in args.file:
        if path == STDIN:
            frames.append(sys.stdin.buffer.read())
        else:
            try:
                frames.append(files.read(path, PAYLOAD_FILE))
            except OSError as error:
                raise ValueError(f"cannot read the payload file {path}: {error.strerror or error}") from None
    return frames


def _not_before(text: str) -> float:
    """A time given as ISO 8601 with a time zone, or as seconds since the epoch (``--not-before``): seconds since
    the epoch."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = datetime.datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"a time is ISO 8601 with a time zone (2026-12-24T18:00:00+01:00) or seconds since the epoch, "
                f"not {text!r}"
            ) from None
        if when.tzinfo is None:
            raise argparse.ArgumentTypeError(f"give {text!r} a time zone (+01:00, or Z for UTC)") from None
        seconds = when.timestamp()
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"a time is a finite number of seconds since the epoch, not {text!r}")
    return seconds


def _request_id(text: str) -> bytes:
    """A request id given as hex text (``--fetch``)."""
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a request id is hex digits (as --no-wait prints it), not {text!r}") from None


def run(args: argparse.Namespace) -> int:
    if (args.fetch is None) == (args.service is None):
        raise ValueError("give a service (and payload) to send a request, or --fetch ID to get an answer, not both")
    if args.fetch is not None and (args.payload or args.file):
        raise ValueError("--fetch takes no payload: it gets the answer to a request sent earlier")
    target = options.peer(args)
    endpoint, curve = target.endpoint, target.curve
    frames = payload_frames(args)
    typed = _typed(args.serializer, frames) if args.fetch is None else _typed_reply(args.serializer)
    started = time.monotonic()
    with Client(
        target.where, args.transport, heartbeat_interval=args.heartbeat_interval, liveness=args.liveness,
        fail_unknown=args.fail_unknown, fail_unreachable=args.fail_unreachable, **curve.kwargs(),
    ) as client:  # fmt: skip
        if args.fetch is not None:
            return _fetch(client, args, typed)
        payload: Any = frames if typed is None else serializers.encode(typed[0], typed[1])
        if args.no_wait:
            return _send_detached(client, args, payload)
        future: RequestFuture | None = None
        try:
            with _interrupt_deferred():  # a Ctrl-C now would leave the request sent and nothing to withdraw it by
                future = client.submit(
                    args.service,
                    payload,
                    on_partial=lambda reply: _ignore(_print(reply, typed)),
                    delay=args.delay or None,
                    not_before=args.not_before,
                )
            reply = future.result(args.timeout)  # (only this times out)
        except RequestFailed as error:
            return _fail(Exit.FAILED, f"request failed: {error}")
        except HandshakeFailed as error:
            return _fail(Exit.NO_BROKER, _refused(args, endpoint, error))
        except TimeoutError:
            assert future is not None
            if not future.cancel() and future.done():
                reply = future.result()
            else:
                if client.connection_refused:
                    waited = time.monotonic() - started
                    message = (
                        f"no broker answered at {endpoint} over {args.transport} within {waited:.1f} s: nothing "
                        "accepts connections there (is a broker running?)"
                    )
                    return _fail(Exit.NO_BROKER, message)
                return _why_no_reply(args, endpoint, started, curve.curve())
        except BaseException:
            if future is not None:
                future.cancel()
            raise
    return _print(reply, typed)


@contextlib.contextmanager
def _interrupt_deferred() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) back until the block is done, then raise it (in the main thread; elsewhere no
    signal lands anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            raise KeyboardInterrupt


def _send_detached(client: Client, args: argparse.Namespace, payload: Any) -> int:
    """``--no-wait``: send the request detached, make sure the broker has it, print its id."""
    future = client.submit(args.service, payload, detached=True, delay=args.delay or None, not_before=args.not_before)
    try:  # the broker answers in order: once mmi.service is answered, the request is in (or was refused)
        client.request("mmi.service", args.service.encode(), args.timeout, fail_unknown=False)
    except HandshakeFailed as error:
        return _fail(Exit.NO_BROKER, _refused(args, client.endpoint, error))
    except TimeoutError:
        return _fail(Exit.NO_BROKER, f"no broker confirmed the request at {client.endpoint} within {args.timeout:g} s")
    if future.done() and future.exception() is not None:
        return _fail(Exit.FAILED, f"request failed: {future.exception()}")
    print(future.request_id.hex(), flush=True)
    return Exit.OK


def _fetch(client: Client, args: argparse.Namespace, typed: tuple[Serializer, Any] | None) -> int:
    """``--fetch ID``: print the answer to the request with that id."""
    try:
        reply = client.fetch(args.fetch, args.timeout)
    except NotFound as error:
        return _fail(Exit.FAILED, f"no answer to fetch: {error}")
    except RequestFailed as error:
        return _fail(Exit.FAILED, f"request failed: {error}")
    except HandshakeFailed as error:
        return _fail(Exit.NO_BROKER, _refused(args, client.endpoint, error))
    except TimeoutError:
        if not client.broker_answered:
            return _fail(Exit.NO_BROKER, probe.nobody_answered(client.endpoint, args.transport, args.timeout))
        return _fail(
            Exit.TIMED_OUT,
            f"no answer to request {args.fetch.hex()} within {args.timeout:g} s: it is still queued or running "
            "(fetch it again later)",
        )
    return _print(reply, typed)


def _refused(args: argparse.Namespace, endpoint: str, error: HandshakeFailed) -> str:
    """The cause of a refused handshake; when it may be the other transport or CURVE, ask the other transport."""
    if error.kind != "handshake" or args.curve_server_key:
        return str(error)
    other = next(t for t in options.TRANSPORTS if t != args.transport)
    if probe.answers_over(endpoint, other, PROBE_TIMEOUT):
        refused = f"the broker at {endpoint} refused the {args.transport} handshake"
        return f"{refused}; a broker answers there over {other}: use --transport {other}"
    return str(error)


def _typed(name: str | None, frames: list[bytes]) -> tuple[Serializer, Any] | None:
    """The serializer and the value (JSON text in one frame) of a typed request; None for raw bytes."""
    if name is None:
        return None
    if len(frames) != 1:
        raise ValueError(f"--{'json' if name == 'json' else 'serializer'} takes one JSON value, not {len(frames)}")
    try:
        value = json.loads(frames[0])
    except ValueError as error:
        raise ValueError(f"the payload is not JSON: {error}") from None
    return serializers.get(name), value


def _typed_reply(name: str | None) -> tuple[Serializer, Any] | None:
    """The serializer a fetched reply is decoded with (``--json``/``--serializer``); None for raw bytes."""
    return None if name is None else (serializers.get(name), None)


def _print(reply: Reply, typed: tuple[Serializer, Any] | None) -> Exit:
    """Print a (partial) reply: its frames one a line, or its value as JSON."""
    if typed is None:
        for frame in reply.frames:
            print(frame.decode(errors="replace"), flush=reply.partial)
        return Exit.OK
    what = "partial reply" if reply.partial else "reply"
    try:
        value = serializers.decode(typed[0], reply.frames, what)
    except (errors.ContentTypeError, errors.DecodeError) as error:
        return _fail(Exit.FAILED, str(error))
    print(json.dumps(value, default=repr, ensure_ascii=False), flush=reply.partial)
    return Exit.OK


def _ignore(_: object) -> None:
    """(A partial reply's print status: a partial that does not decode was said on stderr.)"""


def _fail(status: Exit, message: str) -> Exit:
    print(f"generaldomo client: {message}", file=sys.stderr)
    return status


def _why_no_reply(args: argparse.Namespace, endpoint: str, started: float, curve: Curve | None) -> Exit:
    """Ask the broker why no reply came (the request itself was cancelled when the wait timed out)."""
    no_reply = f"no reply to {args.service!r} within {args.timeout:g} s"
    if probe.broker_instance(endpoint, args.transport, PROBE_TIMEOUT, curve) is None:
        return _fail(Exit.NO_BROKER, probe.nobody_answered(endpoint, args.transport, _since(started), curve))
    served = probe.served(endpoint, args.transport, args.service, PROBE_TIMEOUT, curve)
    if served is None:
        return _fail(Exit.TIMED_OUT, f"{no_reply}; the broker at {endpoint} answers heartbeats but not mmi.service")
    if not served:
        return _fail(Exit.FAILED, f"{no_reply}: {probe.unserved(endpoint, args.transport, args.service, curve)}")
    return _fail(
        Exit.TIMED_OUT,
        f"{no_reply}; the broker at {endpoint} answers and has workers for it, so the request is still queued or "
        f"running (see: generaldomo status --transport {args.transport} {endpoint})",
    )


def _since(started: float) -> Callable[[], float]:
    return lambda: time.monotonic() - started


DESCRIPTION = f"""\
Send one request and print the reply, one frame a line (with --json or
--serializer: the reply's value as JSON); partial results are printed as they
come. Options may come before, between or after the service and the payload.
If no reply comes within --timeout, ask the broker why (up to {PROBE_TIMEOUT:g} s per
question) and say so.

exit status:
  0  the reply was printed
  1  an error status, or no worker serves the service (404: at once, unless
     --wait-for-service; or mmi.service says so after a timeout); --fetch:
     the broker has no request with that id
  2  a usage or set-up error
  3  no broker answered at the endpoint over this transport, or it refused
     the handshake (the other transport, CURVE missing or wrong)
  4  the broker has workers for the service; the request is queued or running
     (--fetch: not answered yet; fetch again later)

--no-wait and --fetch: `generaldomo client --no-wait SERVICE PAYLOAD` prints
the request's id (hex) once the broker holds it, and exits; the broker keeps
the request queued while nobody waits for it, and its answer for
--keep-answers seconds once it is ready. `generaldomo client --fetch ID` prints
that answer, waiting while the request is queued or running. Without CURVE the
id alone fetches the answer (keep it private); under CURVE only the same key.
"""
COMMAND = Command(
    "client", "send one request and print the reply", arguments, run, DESCRIPTION, extra="payload",
    configurable=True, per_run=("fetch", "no_wait", "file", "delay", "not_before"),
)  # fmt: skip
