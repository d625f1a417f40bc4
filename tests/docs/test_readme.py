"""The README's "Your first worker" walk-through, run as written: app module, broker, two workers, client."""

from __future__ import annotations

import ast
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

from app_harness import ROOT, wait_for_workers

from generaldomo import Client

# `generaldomo worker module:attr` runs the pool; until the command is wired to it, this runs the same thing
WORKER = [sys.executable, "-m", "generaldomo", "worker"]


def walk_through() -> tuple[str, list[str], str]:
    """The app module, the shell commands and the client script of the README's walk-through."""
    text = (ROOT / "README.rst").read_text()
    section = text.split("Your first worker\n-----------------\n", 1)[1].split("\n-----", 1)[0]
    blocks: list[list[str]] = []
    lines = section.splitlines()
    for number, line in enumerate(lines):
        if line.startswith(".. code-block::") or (line.endswith("::") and not line.startswith("..")):
            body = []
            for following in lines[number + 1 :]:
                if following and not following.startswith("    "):
                    break
                body.append(following[4:])
            blocks.append(body)
    app, commands, client = ("\n".join(block).strip() + "\n" for block in blocks)
    return app, [line for line in commands.splitlines() if line], client


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def expected_output(script: str) -> list[str]:
    """What the script's ``print(...)  # shown`` lines say they print."""
    return [line.split("#", 1)[1].strip() for line in script.splitlines() if "print(" in line and "#" in line]


def command(line: str, port: int) -> list[str]:
    words = shlex.split(line.replace("5555", str(port)))
    assert words[0] == "generaldomo"
    if words[1] == "worker":
        return [*WORKER, *words[2:]]
    return [sys.executable, "-m", "generaldomo", *words[1:]]


def test_the_first_worker_walk_through_runs_as_written(tmp_path: Path) -> None:
    app, commands, client = walk_through()
    assert len(commands) == 3 and ast.parse(app) and ast.parse(client)
    port = free_port()
    (tmp_path / "tasks.py").write_text(app)
    (tmp_path / "client.py").write_text(client.replace("5555", str(port)))
    started = []
    try:
        for line in commands:
            log = (tmp_path / f"{len(started)}.log").open("wb")
            started.append(subprocess.Popen(command(line, port), cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT))
            if len(started) == 1:
                with Client(f"tcp://127.0.0.1:{port}", fail_unreachable=False) as probe:
                    probe.status(timeout=60)  # the broker is up (it may not listen yet)
        with Client(f"tcp://127.0.0.1:{port}") as probe:
            wait_for_workers(probe, {"square": 4, "shout": 12})
        run = subprocess.run([sys.executable, "client.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout.splitlines() == expected_output(client)
    finally:
        for process in reversed(started):
            process.send_signal(signal.SIGTERM)
        codes = [process.wait(60) for process in started]
    assert codes == [0, 0, 0], [(tmp_path / f"{n}.log").read_text() for n in range(3)]
