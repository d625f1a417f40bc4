"""What the fuzzer sends: messages of every dialect and command, as a corpus and as hypothesis strategies.

Every field a peer sends is taken from the one table of field limits (:mod:`generaldomo.sansio.wire.limits`): each
field's values just within and just beyond its bounds (:func:`edges`), for lengths, counts, depths and numbers.
Messages follow the protocol's own tables (:data:`~generaldomo.sansio.wire.protocol.PREFIX`, the command bytes) and
one layout of arguments per command (:data:`LAYOUTS`), so a command or dialect is fuzzed once it is in those
tables and here. MMI bodies are odd JSON (deep, huge numbers, NaN, wrong types: :data:`JSON_TRICKS`) and
near-valid queries and flow limits with each value at its bounds; ROUTER envelopes carry hops of every length
and count, and forged hops that look like protocol headers; SERVER message parts are packed frames or bytes
that are not.

Two ways to use them. :func:`corpus` lists, deterministically, every command with every argument in turn at
each of its edge values (and every MMI body, every envelope), so a short run covers every bound. The
strategies (:func:`messages`, :func:`hops`, :func:`server_parts`) draw from the same values and combine them
at random with random ones, for the runs that look for what the corpus did not think of. Large values are
built from a drawn length rather than drawn byte by byte, so a 4 KiB field costs hypothesis a few bytes.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Sequence

from hypothesis import strategies as st

from generaldomo.sansio.broker.flow.flow import LIMIT_NAMES
from generaldomo.sansio.config.settings import DEFAULT_MAX_FRAMES
from generaldomo.sansio.wire import codec, limits, protocol
from generaldomo.sansio.wire.events import Dialect
from generaldomo.sansio.wire.limits import Field

Frames = list[bytes]
CLIENT, WORKER = False, True
HONEST_SERVICE = b"echo"  # the honest peers' service: hostile workers never register for it
MMI_NAMES = (b"mmi.flow", b"mmi.status", b"mmi.service", b"mmi.", b"mmi.nothing")

# ------------------------------------------------------------------------------------- values at the bounds


def bounds(field: Field) -> list[tuple[int, bool]]:
    """Sizes (or values) at the edges of ``field``'s bounds, each with whether it is within them: what finds a
    bound that is not checked (lengths below 0 left out)."""
    candidates = dict.fromkeys((field.low - 1, field.low, field.high, field.high + 1))
    return [(n, field.admits(n)) for n in candidates if field.measure is limits.Measure.VALUE or n >= 0]


def edges(field: Field) -> list[int]:
    """The sizes or values just within and just beyond ``field``'s bounds, as the table gives them
    (:func:`bounds`)."""
    return [value for value, _ in bounds(field)]


def edge_frames(field: Field, fill: bytes = b"x") -> list[bytes]:
    """Frames of every length in :func:`edges` of ``field``, of ``fill`` repeated."""
    return [(fill * (size // len(fill) + 1))[:size] for size in edges(field)]


def edge_texts(field: Field) -> list[str]:
    """Texts of every length (in characters) in :func:`edges` of ``field``, and two that are not printable."""
    return ["h" * size for size in edges(field)] + ["\x00", "a\u2028b"]


NON_FINITE = [math.nan, math.inf, -math.inf]
WRONG_TYPES: list[object] = [None, True, "", "1", "x" * 300, [], [1], {}, {"min": 1}]


def edge_numbers(field: Field) -> list[int | float]:
    """Numbers at ``field``'s bounds (whole, as floats, a float's step either side), non-finite ones, and a few
    that are odd anywhere (0, -0.0, a half, 1e-300, 2^53 + 1, 10^400)."""
    whole = edges(field)
    floats = [float(v) for v in whole if abs(v) < 2**1020]
    steps = [math.nextafter(float(b), float(d)) for b in (field.low, field.high) for d in (-math.inf, math.inf)]
    return [*whole, *floats, *steps, *NON_FINITE, 0, -0.0, 0.5, 1e-300, 2**53 + 1, 10**400]


def nested(depth: int, core: bytes = b"1") -> bytes:
    """``core`` nested ``depth`` arrays and objects deep."""
    opening = (b"[" if level % 2 == 0 else b'{"k":' for level in range(depth))
    closing = (b"]" if level % 2 == 0 else b"}" for level in reversed(range(depth)))
    return b"".join(opening) + core + b"".join(closing)


def dumps(value: object) -> bytes:
    """JSON text of ``value``: NaN and Infinity as Python writes them (not JSON), huge integers in full."""
    return json.dumps(value, allow_nan=True).encode()


_DEPTH = limits.JSON_DEPTH
JSON_TRICKS: list[bytes] = [
    *(nested(depth, core) for depth in (*edges(_DEPTH), 1000, 20_000, 100_000) for core in (b"1", b"NaN")),
    b"1e400", b"-1e400", b"1e-400", b"NaN", b"Infinity", b"-Infinity", b"1" + b"0" * 400, b"9" * 5000,
    b'{"rate": 1e400}', b'{"rate": NaN}', b'{"concurrency": Infinity}', b'{"limit": 1e400}',
    *(b'"' + b"x" * (size - 2) + b'"' for size in edges(limits.JSON_BYTES)),
    b"[1,", b"{", b"\xff\xfe", b'{"a": 1, "a": 2}', b"", b"null", b"[]", b'"\\u0000\\ud800"',
]  # fmt: skip
"""JSON texts that are odd anywhere JSON is read: nested at and beyond the depth bound (and 20,000 and
100,000 deep), numbers too large for a float, NaN and Infinity, texts around the size bound, not UTF-8, not
JSON at all."""


def flow_bodies() -> list[bytes]:
    """``mmi.flow`` limits, one key at a time at each of its field's bounds or of a wrong type."""
    numeric = {"rate": limits.RATE, "burst": limits.BURST, "concurrency": limits.CONCURRENCY,
               "bytes_in_flight": limits.BYTES_IN_FLIGHT}  # fmt: skip
    made = [{key: value} for key, field in numeric.items() for value in [*edge_numbers(field), *WRONG_TYPES]]
    for key in ("adaptive", "backoff"):
        bounds = [*edge_numbers(limits.ADAPTIVE), *WRONG_TYPES]
        made += [{key: {"min": value}} for value in bounds] + [{key: {"max": value}} for value in bounds]
        made += [{key: value} for value in WRONG_TYPES] + [{key: {"min": 5, "max": 2}}, {key: {"other": 1}}]
    tenant_values = [*edge_numbers(limits.WEIGHT), *WRONG_TYPES]
    made += [{"tenants": {"t": {"weight": value}}} for value in tenant_values]
    made += [{"tenants": {"t": {key: value}}} for key in ("rate", "burst", "concurrency") for value in NON_FINITE]
    made += [{"tenants": {name: {"weight": 2}}} for name in edge_texts(limits.TENANT)]
    made += [{"tenants": {f"t{i}": {"weight": 1} for i in range(n)}} for n in edges(limits.TENANTS)]
    made += [{"tenants": value} for value in WRONG_TYPES] + [{"unknown": 1}, {}]
    made += [{"retry": {"retries": value}} for value in [*edge_numbers(limits.RETRIES), *WRONG_TYPES]]
    delays = [*edge_numbers(limits.RETRY_DELAY), *WRONG_TYPES]
    made += [{"retry": {"backoff": {key: value}}} for key in ("min", "max") for value in delays]
    made += [{"retry": {"statuses": [value]}} for value in [*edge_numbers(limits.RETRY_STATUS), *WRONG_TYPES]]
    made += [{"retry": value} for value in WRONG_TYPES] + [{"retry": {"statuses": list(range(500, 600)) * 2}}]
    assert {key for limits_ in made for key in limits_} - {"unknown"} == set(LIMIT_NAMES), "a flow limit not fuzzed"
    return [dumps(value) for value in made]


def status_queries() -> list[bytes]:
    """``mmi.status`` queries, one key at a time at its bounds or of a wrong type."""
    made: list[dict[str, object]] = [{"limit": value} for value in [*edge_numbers(limits.STATUS_PAGE), *WRONG_TYPES]]
    made += [{key: value} for key in ("services_after", "service") for value in [*edge_texts(limits.SERVICE_NAME),
                                                                                   *WRONG_TYPES]]  # fmt: skip
    made += [{"workers_after": value} for value in [*edge_numbers(limits.JSON_INTEGER), *WRONG_TYPES]]
    made += [{"order": value} for value in ("name", "busy", "", 1)] + [{"page": 2}]
    return [dumps(value) for value in made] + edge_frames(limits.STATUS_QUERY, b" ")


def peer_infos() -> list[bytes]:
    """Peer-info frames: each key at its bounds or of a wrong type, and sizes around the frame's bound."""
    made: list[dict[str, object]] = [{"host": value} for value in [*edge_texts(limits.HOST), *WRONG_TYPES]]
    made += [{"pid": value} for value in [*edge_numbers(limits.PID), *WRONG_TYPES]]
    made += [{"features": value} for value in [["fields", "cancel"], ["x", 1], *WRONG_TYPES]]
    framed = [b"{" + b" " * (size - 2) + b"}" for size in edges(limits.PEER_INFO) if size >= 2]
    return [dumps(value) for value in made] + framed


def fields_frames() -> list[bytes]:
    """Request fields frames: each tag's value at its bounds, a tag twice, an unknown tag, truncated entries, and
    frames around the size bound."""
    deadline, priority, tenant = protocol.FIELD_DEADLINE, protocol.FIELD_PRIORITY, protocol.FIELD_TENANT
    made = [_entry(deadline, ms.to_bytes(4, "big")) for ms in (0, 1, 2**31, 2**32 - 1)]
    made += [_entry(deadline, b"\x00" * n) for n in (0, 3, 5)]
    made += [_entry(priority, (p % 256).to_bytes(1, "big")) for p in edges(limits.PRIORITY)]
    made += [_entry(priority, b""), _entry(priority, b"\x00\x00")]
    made += [_entry(tenant, name.encode()) for name in edge_texts(limits.TENANT)] + [_entry(tenant, b"\xff")]
    made += [_entry(deadline, bytes(4)) * 2, _entry(0x7F, b"later"), b"\x01", b"\x01\x04\x00", b"\x03\xff"]
    return made + edge_frames(limits.FIELDS_FRAME, _entry(0x7F, b""))


def _entry(tag: int, value: bytes) -> bytes:
    """One request field: tag, length (a value over 255 bytes cut to fit), value."""
    return bytes((tag, len(value[:255]))) + value[:255]


def request_id_lists() -> list[Frames]:
    """What a HEARTBEAT asks about: counts around the bound, of ids around theirs."""
    longest = edge_frames(limits.REQUEST_ID)
    return [[b"%016d" % i for i in range(n)] for n in edges(limits.REASKED)] + [longest, [longest[-1]] * 64]


def statuses() -> list[bytes]:
    """Statuses: lengths around the bound (5,000 digits too), codes the protocol knows, and odd ones."""
    known = [protocol.OK, protocol.OVER_BUDGET, protocol.WORKER_ERROR, b"999", b"000", b"20x", b"5" * 5000]
    return edge_frames(limits.STATUS, b"5") + known


def body_lists() -> list[Frames]:
    """Body frames: none, around the broker's frame limit, and one large frame."""
    return [[], [b""], [b""] * (DEFAULT_MAX_FRAMES - 8), [b""] * (DEFAULT_MAX_FRAMES + 1), [b"x" * 2**20]]


def descriptions() -> list[bytes]:
    """Descriptions and service names around both bounds, not UTF-8, and MMI-like names."""
    return [*edge_frames(limits.DESCRIPTION), *edge_frames(limits.SERVICE_NAME), b"\xff", b"mmi.", b"mmi"]


# The argument kinds of a layout, each with the typical value of an honest-looking message and the values at
# its bounds: rid, desc, task, status, info, fields, body (frames to the end), ids (request ids to the end),
# addr (an MDP client address, which the broker gave as a task id) and empty (an MDP empty frame).
TYPICAL: dict[str, Frames] = {
    "rid": [b"r" * 16], "desc": [b"svc"], "task": [b"t" * 16], "addr": [b"t" * 16], "status": [protocol.OK],
    "info": [protocol.worker_info("host", 7)], "fields": [protocol.deadline_field(5.0)], "body": [b"payload"],
    "ids": [b"r" * 16], "empty": [b""],
}  # fmt: skip
EDGES: dict[str, list[Frames]] = {
    "rid": [[value] for value in edge_frames(limits.REQUEST_ID)],
    "desc": [[value] for value in descriptions()],
    "task": [[value] for value in edge_frames(limits.TASK_ID)],
    "addr": [[value] for value in edge_frames(limits.TASK_ID)],
    "status": [[value] for value in statuses()],
    "info": [[value] for value in [*peer_infos(), *JSON_TRICKS]],
    "fields": [[value] for value in fields_frames()],
    "body": body_lists(),
    "ids": request_id_lists(),
    "empty": [[b"x"]],
}

# What follows each command's byte, per (dialect, sender is a worker, command): the argument kinds in order,
# several layouts where the protocol has several. Commands a sender must not send have none (random frames).
LAYOUTS: dict[tuple[Dialect, bool, str], tuple[tuple[str, ...], ...]] = {
    (Dialect.GDP, CLIENT, protocol.REQUEST): (("rid", "desc", "body"),),
    (Dialect.GDP, CLIENT, protocol.FIELDS_REQUEST): (("rid", "desc", "fields", "body"),),
    (Dialect.GDP, CLIENT, protocol.HEARTBEAT): (("ids",),),
    (Dialect.GDP, CLIENT, protocol.CANCEL): (("rid",),),
    (Dialect.GDP, WORKER, protocol.READY): (("desc",), ("desc", "info"), ("desc", "task", "status", "body")),
    (Dialect.GDP, WORKER, protocol.PARTIAL): (("task", "body"),),
    (Dialect.GDP, WORKER, protocol.RESUME): (("desc", "task"), ("desc", "task", "info")),
    (Dialect.GDP, WORKER, protocol.HANDOVER): (("task", "status", "body"),),
    (Dialect.MDP01, CLIENT, protocol.REQUEST): (("desc", "body"),),
    (Dialect.MDP01, WORKER, protocol.READY): (("desc",),),
    (Dialect.MDP01, WORKER, protocol.FINAL): (("addr", "empty", "body"),),
    (Dialect.MDP02, CLIENT, protocol.REQUEST): (("desc", "body"),),
    (Dialect.MDP02, WORKER, protocol.READY): (("desc",),),
    (Dialect.MDP02, WORKER, protocol.PARTIAL): (("addr", "empty", "body"),),
    (Dialect.MDP02, WORKER, protocol.FINAL): (("addr", "empty", "body"),),
}
for (_dialect, _worker, _command), _layouts in list(LAYOUTS.items()):
    if _dialect is Dialect.MDP02:  # majortomo: MDP/0.2's layouts after an empty frame (and its own bytes)
        LAYOUTS[Dialect.MAJORTOMO, _worker, _command] = _layouts


def commands() -> list[tuple[Dialect, bool, str]]:
    """Every (dialect, sender is a worker, command) the protocol's tables list, in a fixed order; MDP/0.1
    clients have no command byte, so theirs is REQUEST alone."""
    made = [(d, WORKER, name) for d, table in protocol.WORKER_COMMANDS.items() for name in table]
    made += [(d, CLIENT, name) for d, table in protocol.CLIENT_COMMANDS.items() for name in table]
    return [*made, (Dialect.MDP01, CLIENT, protocol.REQUEST)]


def head(dialect: Dialect, worker: bool, command: str) -> Frames:
    """The frames before a command's arguments: the dialect's prefix for the sender, then the command's byte."""
    prefix = list(protocol.PREFIX[dialect, worker])
    if dialect is Dialect.MDP01 and not worker:
        return prefix
    table = protocol.WORKER_COMMANDS if worker else protocol.CLIENT_COMMANDS
    return [*prefix, table[dialect][command].to_bytes(1, "big")]


def mmi_bodies(name: bytes) -> list[Frames]:
    """Bodies of an MMI request for ``name``: each value at its bounds, odd JSON, one frame too many."""
    if name == b"mmi.flow":
        made = [[b"svc", body] for body in [*flow_bodies(), *JSON_TRICKS]]
        made += [[value] for value in descriptions()] + [[], [b"svc", b"{}", b"extra"]]
    elif name == b"mmi.status":
        made = [[query] for query in [*status_queries(), *JSON_TRICKS]] + [[], [b"{}", b"extra"]]
    elif name == b"mmi.service":
        made = [[value] for value in [*descriptions(), *JSON_TRICKS]] + [[], [b"svc", b"extra"]]
    else:
        made = [[value] for value in JSON_TRICKS[:4]]
    return made


def mmi_layouts() -> list[tuple[Dialect, str, tuple[str, ...]]]:
    """The client requests that carry a description, per dialect: where an MMI request goes."""
    return [(d, c, layout) for (d, worker, c), layouts in LAYOUTS.items() if not worker and "desc" in layouts[0]
            for layout in layouts]  # fmt: skip


# ------------------------------------------------------------------------------------------------ the corpus


def corpus() -> Iterator[tuple[str, Frames, Frames]]:
    """``(what, hops, frames)`` of every command of every dialect with each argument in turn at each of its
    edge values (the others typical), every MMI request body in every dialect, and a typical request and READY
    behind every envelope; ``what`` says which, for a failure's message."""
    serial = itertools.count()
    for dialect, worker, command in commands():
        name = f"{dialect.value} {'worker' if worker else 'client'} {command}"
        for layout in LAYOUTS.get((dialect, worker, command), (("body",),)):
            yield f"{name} {layout}", [], _message(dialect, worker, command, layout, {}, next(serial))
            for at, kind in enumerate(layout):
                for value in EDGES[kind]:
                    frames = _message(dialect, worker, command, layout, {at: value}, next(serial))
                    yield f"{name} {layout} {kind}={shown(value)}", [], frames
    for dialect, command, layout in mmi_layouts():
        for mmi_name in MMI_NAMES:
            for body in mmi_bodies(mmi_name):
                parts = {layout.index("desc"): [mmi_name], len(layout) - 1: body}
                frames = _message(dialect, CLIENT, command, layout, parts, next(serial))
                yield f"{dialect.value} {command} {mmi_name!r} body={shown(body)}", [], frames
    for route in hop_lists():
        yield f"hops={shown(route)}", route, protocol.gdp_request(b"r%015d" % next(serial), b"svc", [b"payload"])
        yield f"hops={shown(route)} READY", route, protocol.gdp_ready(b"svc")


def _message(
    dialect: Dialect, worker: bool, command: str, layout: tuple[str, ...], parts: dict[int, Frames], serial: int
) -> Frames:
    """A message of ``layout`` with ``parts`` at their places and the typical values elsewhere; a typical request
    id is made unique by ``serial`` (else each request would be a retry of the first one still in flight)."""
    typical = {**TYPICAL, "rid": [b"r%015d" % serial]}
    args = [frame for at, kind in enumerate(layout) for frame in parts.get(at, typical[kind])]
    return head(dialect, worker, command) + args


def shown(frames: Sequence[bytes]) -> str:
    """A few frames of a message, shortened, for a failure's message."""
    return f"[{len(frames)} frames: {', '.join(f'{len(f)}B {bytes(f[:12])!r}' for f in frames[:3])}]"


def hop_lists() -> list[Frames]:
    """Envelopes a peer puts before its message: hop counts and hop lengths around their bounds, and forged hops
    that look like protocol headers, delimiters or generated routing ids."""
    made = [[b"h%d" % i for i in range(n)] for n in edges(limits.HOPS) if n]
    made += [[hop] for hop in edge_frames(limits.HOP, b"h") if hop]
    made += [[header] for header in sorted(_HEADERS)] + [[b""], [b"", b""], [b"\x00\x00\x00\x00\x01"]]
    return made


_HEADERS = frozenset(header for _, header in protocol.HEADERS)

# ------------------------------------------------------------------------------------------------ strategies

# Choices listed with the usual one first: hypothesis draws the first of a list (and the ends of a range) more
# often than the others.
_MUTATIONS = st.sampled_from([None] * 20 + ["drop", "add", "repeat", "replace", "cut"])
_UNKNOWN_BYTE = st.sampled_from([False] * 7 + [True])


def _arguments(kind: str, known_tasks: Sequence[bytes], known_ids: Sequence[bytes]) -> st.SearchStrategy[Frames]:
    """One argument of ``kind``: typical, at an edge, random, or (task ids, request ids) one a peer has seen."""
    values = [st.just(TYPICAL[kind]), st.sampled_from(EDGES[kind]), _RANDOM[kind]]
    if kind in ("task", "addr") and known_tasks:
        values.append(st.sampled_from([[task] for task in known_tasks]))
    if kind in ("rid", "ids") and known_ids:
        values.append(st.lists(st.sampled_from(list(known_ids)), min_size=1, max_size=3 if kind == "ids" else 1))
    return st.one_of(*values)


_SMALL = st.binary(max_size=24)
_RANDOM: dict[str, st.SearchStrategy[Frames]] = {
    "rid": st.lists(st.binary(min_size=1, max_size=32), min_size=1, max_size=1),
    "desc": st.lists(st.sampled_from([b"a", b"b", b"svc"]) | _SMALL, min_size=1, max_size=1),
    "task": st.lists(_SMALL, min_size=1, max_size=1),
    "addr": st.lists(_SMALL, min_size=1, max_size=1),
    "status": st.lists(st.binary(min_size=3, max_size=3) | _SMALL, min_size=1, max_size=1),
    "info": st.lists(_SMALL, min_size=1, max_size=1),
    "fields": st.lists(_SMALL, min_size=1, max_size=1),
    "body": st.lists(_SMALL, max_size=3),
    "ids": st.lists(_SMALL, max_size=4),
    "empty": st.lists(_SMALL, min_size=1, max_size=1),
}


def messages(known_tasks: Sequence[bytes] = (), known_ids: Sequence[bytes] = ()) -> st.SearchStrategy[Frames]:
    """One message a hostile peer sends: any command of any dialect (:func:`commands_of_any_kind`), or as often
    a client's request to an MMI service (:func:`mmi_requests`), or a worker's result for a task id it knows
    (``known_tasks``: given to it, or seen)."""
    results = [worker_results(known_tasks)] if known_tasks else []
    return st.one_of(commands_of_any_kind(known_tasks, known_ids), mmi_requests(known_ids), *results)


@st.composite
def commands_of_any_kind(draw: st.DrawFn, known_tasks: Sequence[bytes], known_ids: Sequence[bytes]) -> Frames:
    """Any command of any dialect with each argument typical, at an edge or random (commands without a layout get
    random frames); one in eight with an unknown command byte; one in five mutated (see :func:`mutated`)."""
    dialect, worker, command = draw(st.sampled_from(commands()))
    layout = draw(st.sampled_from(LAYOUTS.get((dialect, worker, command), (("body",),))))
    first = head(dialect, worker, command)
    if len(first) > len(protocol.PREFIX[dialect, worker]) and draw(_UNKNOWN_BYTE):
        first[-1] = bytes([draw(st.integers(0, 255))])
    args = [frame for kind in layout for frame in draw(_arguments(kind, known_tasks, known_ids))]
    return draw(mutated(first + args))


@st.composite
def mmi_requests(draw: st.DrawFn, known_ids: Sequence[bytes] = ()) -> Frames:
    """A client's request of any dialect for an MMI service, with one of :func:`mmi_bodies` or a body of odd
    JSON values (:func:`json_values`); one in five mutated."""
    dialect, command, layout = draw(st.sampled_from(mmi_layouts()))
    name = draw(st.sampled_from(MMI_NAMES))
    args = [frame for kind in layout[:-1] for frame in
            ([name] if kind == "desc" else draw(_arguments(kind, (), known_ids)))]  # fmt: skip
    random_json = st.builds(lambda first, value: [*first, dumps(value)], st.sampled_from([[b"svc"], []]), json_values())
    body = draw(st.one_of(st.sampled_from(mmi_bodies(name)), random_json))
    return draw(mutated(head(dialect, CLIENT, command) + args + body))


def json_values() -> st.SearchStrategy[object]:
    """Arbitrary JSON-ish values, nested a little: huge and non-finite numbers, long and odd strings."""
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
        st.sampled_from(edge_numbers(limits.JSON_INTEGER) + edge_numbers(limits.JSON_NUMBER)),
    )  # fmt: skip
    keys = st.sampled_from([*LIMIT_NAMES, "limit", "min", "max", "weight", "host", "pid"]) | st.text(max_size=6)
    return st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4), max_leaves=12
    )


@st.composite
def worker_results(draw: st.DrawFn, known_tasks: Sequence[bytes]) -> Frames:
    """A worker's result of any dialect (GDP: READY with a result, PARTIAL, HANDOVER) for a known task id, with
    a status and body typical, at an edge or random; one in five mutated."""
    task = [draw(st.sampled_from(list(known_tasks)))]
    dialect = draw(st.sampled_from(list(Dialect)))
    status = draw(_arguments("status", (), ()))
    if dialect is Dialect.GDP:
        command = draw(st.sampled_from([protocol.READY, protocol.PARTIAL, protocol.HANDOVER]))
        args = {protocol.READY: [b"svc", *task, *status], protocol.PARTIAL: task}.get(command, [*task, *status])
    else:
        command = draw(st.sampled_from([c for c in (protocol.FINAL, protocol.PARTIAL) if (dialect, WORKER, c) in
                                        LAYOUTS]))  # fmt: skip
        args = [*task, b""]
    return draw(mutated(head(dialect, WORKER, command) + args + draw(_arguments("body", (), ()))))


@st.composite
def mutated(draw: st.DrawFn, frames: Frames) -> Frames:
    """``frames`` unchanged four times in five, else with a frame dropped, added, repeated or replaced, or the
    message cut short."""
    how = draw(_MUTATIONS)
    if how is None or not frames:
        return frames
    at = draw(st.integers(0, len(frames) - 1))
    if how == "drop":
        return frames[:at] + frames[at + 1 :]
    if how == "add":
        return [*frames[:at], draw(_SMALL), *frames[at:]]
    if how == "repeat":
        return frames[: at + 1] + frames[at:]
    if how == "replace":
        return [*frames[:at], draw(_SMALL), *frames[at + 1 :]]
    return frames[:at]


def hops() -> st.SearchStrategy[Frames]:
    """The frames a peer puts before its message on a ROUTER link: none most often (a direct peer), one of
    :func:`hop_lists`, or a few random ones."""
    return st.one_of(st.just([]), st.just([]), st.sampled_from(hop_lists()), st.lists(_SMALL, min_size=1, max_size=3))


def server_parts() -> st.SearchStrategy[bytes]:
    """Message parts for a SERVER link: packed messages, and bytes that are not (a length prefix running past
    the end, a truncated long prefix, empty frames around the frame limit)."""
    packed = messages().map(codec.encode)
    broken = st.one_of(
        st.binary(max_size=32),
        st.sampled_from([b"\xff", b"\xff\x00\x00", b"\xff\xff\xff\xff\xff", b"\x05ab", b"\x00" * 5000]),
        st.builds(lambda n: b"\x00" * n, st.sampled_from([DEFAULT_MAX_FRAMES, DEFAULT_MAX_FRAMES + 1])),
    )
    return st.one_of(packed, packed, broken)
