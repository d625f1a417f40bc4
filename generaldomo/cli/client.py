"""``generaldomo client``: send one request, print the reply's frames one a line.

This module owns the client command's flags, its output and its exit status. The payload comes from the
command line (one frame per argument), from files or stdin (``--file``), or, with ``--json`` or
``--serializer NAME``, is one value (JSON text) for a typed service, whose reply is printed as JSON. Partial
results are printed as they arrive. A refused handshake (the other transport, CURVE missing or wrong) is
reported as soon as the socket monitor sees it. When no reply comes within ``--timeout``, it finds out why (see
:mod:`generaldomo.cli.probe`, at most ``PROBE_TIMEOUT`` seconds more per question) and says so, with an exit
status of its own: nothing answers at the endpoint over this transport (and whether something does over the
other one); no worker serves the service (with the services that have workers, and the nearest name); or the
broker is alive and has workers, so the request is queued or running. The request itself goes through
:class:`generaldomo.peers.client.Client`, which withdraws it (CANCEL) when ``--timeout`` passes or on Ctrl-C,
so an abandoned request never runs later.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from generaldomo.cli import options, probe
from generaldomo.cli.command import Command, Exit
from generaldomo.io.connection import Curve
from generaldomo.peers.client import Client, HandshakeFailed, Reply, RequestFailed
from generaldomo.sansio import serializers
from generaldomo.sansio.serializers import Serializer

PROBE_TIMEOUT = probe.TIMEOUT  # seconds per diagnostic question after a timeout
STDIN = "-"


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    options.connect(parser)
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
    parser.add_argument("service", help="request description (a service name with the default resolver)")
    parser.add_argument("payload", nargs="*", help="payload frames (UTF-8; default: one empty frame)")


def payload_frames(args: argparse.Namespace) -> list[bytes]:
    """The frames the arguments and ``--file`` give, in that order."""
    frames = [p.encode() for p in args.payload]
    for path in args.file:
        if path == STDIN:
            frames.append(sys.stdin.buffer.read())
        else:
            with open(path, "rb") as file:
                frames.append(file.read())
    return frames


def run(args: argparse.Namespace) -> int:
    target = options.peer(args)
    endpoint, curve = target.endpoint, target.curve
    frames = payload_frames(args)
    typed = _typed(args.serializer, frames)
    started = time.monotonic()
    with Client(
        target.where, args.transport, heartbeat_interval=args.heartbeat, liveness=args.liveness, **curve.kwargs()
    ) as client:
        payload: Any = frames if typed is None else serializers.encode(typed[0], typed[1])
        future = client.submit(args.service, payload, on_partial=lambda reply: _ignore(_print(reply, typed)))
        try:
            reply = future.result(args.timeout)
        except RequestFailed as error:
            return _fail(Exit.FAILED, f"request failed: {error}")
        except HandshakeFailed as error:
            return _fail(Exit.NO_BROKER, _refused(args, endpoint, error))
        except TimeoutError:
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
            future.cancel()
            raise
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


def _print(reply: Reply, typed: tuple[Serializer, Any] | None) -> Exit:
    """Print a (partial) reply: its frames one a line, or its value as JSON."""
    if typed is None:
        for frame in reply.frames:
            print(frame.decode(errors="replace"), flush=reply.partial)
        return Exit.OK
    what = "partial reply" if reply.partial else "reply"
    try:
        value = serializers.decode(typed[0], reply.frames, what)
    except (serializers.ContentTypeError, serializers.DecodeError) as error:
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
  1  an error status, or no worker serves the service (mmi.service: 404)
  2  a usage or set-up error
  3  no broker answered at the endpoint over this transport, or it refused
     the handshake (the other transport, CURVE missing or wrong)
  4  the broker has workers for the service; the request is queued or running
"""
COMMAND = Command("client", "send one request and print the reply", arguments, run, DESCRIPTION, extra="payload")
