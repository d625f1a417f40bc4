"""``generaldomo dead``: a service's dead letters (``mmi.dead``): list, show, replay or drop them.

This module owns the dead command's arguments and output: JSON, one object a line (``show``: the letter with its
payload, each frame as UTF-8 text or base64; ``replay --wait``: the replay's answer after it, one frame a line, as
``generaldomo client`` prints one). Its connection settings may also come from ``--config`` and ``GENERALDOMO_*``
variables (:mod:`generaldomo.cli.config`). Under CURVE it needs a key with the admin role.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

from generaldomo.cli import options, probe
from generaldomo.cli.command import Command, Exit
from generaldomo.errors import NotFound, RequestFailed
from generaldomo.peers.client import Client
from generaldomo.sansio.config import knobs
from generaldomo.sansio.wire import wirejson

__all__ = ["COMMAND", "arguments", "run"]

_VERBS = ("list", "show", "replay", "drop")


def arguments(parser: argparse.ArgumentParser) -> None:
    options.transport(parser)
    parser.add_argument(  # (checked in run: a choice argparse checks would be required even with --print-config)
        "verb",
        nargs="?",
        metavar="{" + ",".join(_VERBS) + "}",
        help="what to do with the dead letters (needed but for --print-config)",
    )
    parser.add_argument("service", nargs="?", help="the service whose dead letters (list without it: the services)")
    parser.add_argument(
        "ids", nargs="*", metavar="ID", help="the letters' ids, as list shows them (show, replay, drop)"
    )
    options.connect(parser)
    options.wait_for_broker(parser)
    options.curve(parser)
    options.timeout(parser, "the answer")
    options.add_knob(parser, knobs.COMMANDS["dead_limit"], default=20)
    parser.add_argument(
        "--after", metavar="ID", help="list those after this one (a list's 'next'; default: the oldest)"
    )
    parser.add_argument(
        "--wait", action="store_true", help="replay: wait for the replay's answer (--timeout) and print it"
    )


def run(args: argparse.Namespace) -> int:
    if getattr(args, "verb", None) not in _VERBS:
        raise ValueError(f"generaldomo dead needs what to do: {', '.join(_VERBS)}")
    if args.verb != "list" and (args.service is None or not args.ids):
        raise ValueError(
            f"generaldomo dead {args.verb} needs the SERVICE and the ID of a letter (see: dead list SERVICE)"
        )
    if args.verb in ("show", "replay") and len(args.ids) > 1:
        raise ValueError(f"generaldomo dead {args.verb} takes one ID")
    if args.verb == "list" and args.ids:
        raise ValueError("generaldomo dead list takes a SERVICE at most (--after ID for the next page)")
    for text in [*args.ids, *([args.after] if args.after else [])]:
        try:
            bytes.fromhex(text)
        except ValueError:
            raise ValueError(f"a letter's id is hex text, as 'generaldomo dead list' prints it, not {text!r}") from None
    target = options.peer(args)
    endpoint = target.endpoint
    with Client(endpoint, args.transport, fail_unreachable=args.fail_unreachable, **target.curve.kwargs()) as client:
        try:
            if args.verb == "list":
                query = {"limit": args.dead_limit, "after": args.after}
                print(json.dumps(_ask(client, "list", args.service, None, args.timeout, **query)[0]))
            elif args.verb == "show":
                letter, payload = _ask(client, "show", args.service, args.ids[0], args.timeout)
                print(json.dumps({**letter, "payload": [_frame(frame) for frame in payload]}))
            elif args.verb == "replay":
                replayed = _ask(client, "replay", args.service, args.ids[0], args.timeout)[0]
                print(json.dumps(replayed), flush=True)
                if args.wait:
                    reply = client.fetch(replayed["request_id"], args.timeout)
                    for frame in reply.frames:
                        print(frame.decode(errors="replace"))
            else:
                for letter_id in args.ids:
                    print(json.dumps(_ask(client, "drop", args.service, letter_id, args.timeout)[0]))
        except NotFound as error:
            print(f"generaldomo dead: {error}", file=sys.stderr)
            return Exit.FAILED
        except RequestFailed as error:
            print(f"generaldomo dead: {error}", file=sys.stderr)
            return Exit.FAILED
        except TimeoutError:
            if args.verb == "replay" and client.broker_answered:
                print(f"generaldomo dead: no answer to the replay within {args.timeout:g} s: fetch it later with "
                      "'generaldomo client --fetch REQUEST_ID'", file=sys.stderr)  # fmt: skip
                return Exit.TIMED_OUT
            print(f"generaldomo dead: {probe.nobody_answered(endpoint, args.transport, args.timeout)}", file=sys.stderr)
            return Exit.NO_BROKER
    return Exit.OK


def _ask(
    client: Client, verb: str, service: str | None, letter: str | None, timeout: float, **query: object
) -> tuple[dict[str, Any], list[bytes]]:
    """``mmi.dead VERB`` for ``service`` and the ``letter`` id: its answer's JSON and the frames after it."""
    arguments = {"service": service, "id": letter, **query}
    body = [verb.encode(), json.dumps({k: v for k, v in arguments.items() if v is not None}).encode()]
    first, *rest = client.request("mmi.dead", body, timeout).frames
    answer: dict[str, Any] = wirejson.loads(first, None)
    return answer, list(rest)


def _frame(frame: bytes) -> dict[str, str]:
    """A payload frame as JSON: its UTF-8 text, or else base64."""
    try:
        return {"text": frame.decode()}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(frame).decode()}


COMMAND = Command(
    "dead", "list, show, replay or drop a service's dead letters (mmi.dead; the admin role under CURVE)", arguments,
    run, configurable=True, per_run=("dead_limit", "after", "wait"),
    description="""\
list, show, replay or drop the dead letters of a service (mmi.dead): the tasks
that failed for good, lost with their worker max_attempts times or answered
500, 501, 502 or 503 by it. The broker keeps --dead-letters of them per service
and --dead-bytes in all, the oldest evicted first.

  generaldomo dead list                 the services with dead letters
  generaldomo dead list SERVICE         a page of its letters (--limit, --after)
  generaldomo dead show SERVICE ID      a letter with its payload
  generaldomo dead replay SERVICE ID    send it again as a new task; --wait
                                        prints its answer (else fetch it with
                                        generaldomo client --fetch REQUEST_ID)
  generaldomo dead drop SERVICE ID...   forget letters

Under CURVE the key needs the admin role. Exit status: 0 done, 1 the broker
refused (no such letter: 404; no admin role: 403), 2 bad arguments, 3 no
broker answered, 4 replay --wait: no answer in time.""",
)  # fmt: skip
