"""Records that write their own ``__init__`` (so that the compiled core builds them natively, see
generaldomo.sansio.wire.events): each is a dataclass with ``init=False`` whose ``__init__`` takes exactly its fields,
in order, and sets each one; the records made on every request and reply are among them."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import generaldomo
from generaldomo.sansio.broker.accounts.ledger import Account
from generaldomo.sansio.broker.records import Task
from generaldomo.sansio.peer.session import RunTask
from generaldomo.sansio.wire.events import ClientRequest, Dialect, WorkerReply
from generaldomo.sansio.wire.peer_events import FinalReply

pytestmark = pytest.mark.pure

SANSIO = Path(generaldomo.__file__).resolve().parent / "sansio"
HOT = {"ClientRequest", "WorkerReply", "Task", "Account"}  # made for every request or reply
# the peers' (a client's reply; a worker's task and its result)
PEERS_HOT = {"FinalReply", "TaskRequest", "RunTask", "ToBroker"}


def _dataclass_keywords(node: ast.ClassDef) -> dict[str, object] | None:
    """The keywords of the class's ``@dataclasses.dataclass(...)`` decorator (None: not a dataclass)."""
    for decorator in node.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        target = call.func if call is not None else decorator
        if ast.unparse(target) in ("dataclasses.dataclass", "dataclass"):
            return {k.arg: ast.literal_eval(k.value) for k in (call.keywords if call else []) if k.arg}
    return None


def _fields(node: ast.ClassDef) -> list[str]:
    """The fields its ``__init__`` takes: annotated names, without ClassVars and ``field(init=False)`` ones."""
    found = []
    for stmt in node.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        if "ClassVar" in ast.unparse(stmt.annotation):
            continue
        value = stmt.value
        if isinstance(value, ast.Call) and any(
            k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False for k in value.keywords
        ):
            continue
        found.append(stmt.target.id)
    return found


def written_out() -> dict[str, tuple[Path, ast.ClassDef]]:
    """Every dataclass of the sans-IO layer that defines its own ``__init__``, by class name."""
    found = {}
    for path in sorted(SANSIO.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and _dataclass_keywords(node) is not None:
                if any(isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in node.body):
                    found[node.name] = (path, node)
    return found


def test_the_hot_records_write_their_init() -> None:
    assert HOT | PEERS_HOT <= set(written_out())


@pytest.mark.parametrize("name", sorted(written_out()))
def test_a_written_init_takes_the_fields_in_order_and_sets_each(name: str) -> None:
    path, node = written_out()[name]
    assert _dataclass_keywords(node) is not None and _dataclass_keywords(node).get("init") is False, (
        f"{path.name}: {name} writes its __init__: declare it with init=False"
    )
    init = next(s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__")
    params = [a.arg for a in [*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs]][1:]
    fields = _fields(node)
    assert params == fields, f"{path.name}: {name}.__init__ takes {params}, its fields are {fields}"
    assigned = [
        t.attr
        for s in init.body
        if isinstance(s, ast.Assign)
        for t in s.targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    ]
    assert sorted(assigned) == sorted(fields), f"{path.name}: {name}.__init__ sets {assigned}"


def test_the_records_behave_as_dataclasses() -> None:
    request = ClientRequest(Dialect.GDP, b"r1", b"echo", (b"x",), priority=3)
    assert request == ClientRequest(Dialect.GDP, b"r1", b"echo", (b"x",), None, None, 3)
    assert hash(request) == hash(ClientRequest(Dialect.GDP, b"r1", b"echo", (b"x",), priority=3))
    assert dataclasses.replace(request, priority=4).priority == 4 and request.flags == 0
    assert "priority=3" in repr(request)
    reply = WorkerReply(Dialect.MDP01, b"t", b"200", (b"y",), True)
    assert reply.description is None and dataclasses.astuple(reply)[-1] is None
    first, second = Account(), Account()
    assert first.counts == {} and first.counts is not second.counts and Account(tasks=2).tasks == 2
    assert [f.name for f in dataclasses.fields(Task)][:3] == ["id", "client", "dialect"]
    task = RunTask(b"t", b"echo", (b"x",))
    assert task == RunTask(b"t", b"echo", (b"x",), None, None) and hash(task) == hash(RunTask(b"t", b"echo", (b"x",)))
    assert dataclasses.replace(FinalReply(b"r", b"200", b"", ()), status=b"500").status == b"500"
