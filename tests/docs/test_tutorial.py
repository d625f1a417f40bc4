"""The tutorial (docs/tutorial.rst, its first step README's "Your first worker"), run as written and in order: the
app module, a broker and two workers, the client script, then status, flow limits and tenants on the same broker
(one broker for the whole tutorial)."""

from __future__ import annotations

from pathlib import Path

from doc_blocks import named
from doc_session import localised, run


def shown(script: str) -> list[str]:
    """What a script's ``print(...)  # shown (remark)`` lines say they print."""
    return [line.split("#", 1)[1].split(" (")[0].strip() for line in script.splitlines() if "print(" in line]


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    ports: dict[str, str] = {}
    scripts = {"client.py": named("first-worker-client"), "shares.py": named("tutorial-shares")}
    (tmp_path / "tasks.py").write_text(named("first-worker-app"))
    for name, text in scripts.items():
        (tmp_path / name).write_text(localised(text, tmp_path, ports))
    steps = [
        named("first-worker-commands"),
        'python client.py\necho "--- status"\n',
        named("tutorial-status"),
        'echo "--- flow"\n',
        named("tutorial-flow"),
        named("tutorial-tenants"),
        'echo "--- shares"\npython shares.py\n',
    ]
    out = run("".join(steps), tmp_path, ports).split("\n--- ")
    assert out[0].splitlines() == shown(scripts["client.py"]) == ["[1, 4, 9]", "b'HELLO!'", "[[0], [1], [4]]"]
    status = out[1]
    assert "square" in status and "shout" in status and '"name": "square"' in status
    flow = out[2]
    assert "concurrency" in flow and "50" in flow
    assert out[3].splitlines()[1:] == shown(scripts["shares.py"]) == ["[49]", "500"]
