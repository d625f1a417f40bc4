"""Running a shell block of the guide as written: its commands in one bash script, on this machine's free ports.

``generaldomo`` in the block is this checkout's (``python -m generaldomo``). A command that serves until stopped
(``generaldomo broker``, ``worker``, ``bridge``, ``dashboard``) runs in the background, and the script waits until
it is ready before the next line: a broker, bridge or dashboard has printed where it listens, a worker is counted
by the broker it connects to. Every other line must succeed (``set -e``). The block's ports (``:5555``, ``:8077``)
become free ones, ``/tmp/`` the test's folder; a command without ``--connect`` finds the broker of ``:5555`` (as it
finds ``tcp://127.0.0.1:5555`` by default) through ``GENERALDOMO_BROKER``, and a broker without an endpoint binds
there. The whole process group is stopped at
the end.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from generaldomo import Client

ROOT = Path(__file__).resolve().parents[1]
SERVING = {"broker": "generaldomo broker: ", "bridge": "generaldomo bridge: ", "dashboard": "generaldomo dashboard: "}
PORT = re.compile(r"(?<=:)(\d{4,5})\b")
PRELUDE = """\
set -euo pipefail
ready() {  # LOG TEXT: wait (up to 60 s) until LOG has a line with TEXT
    for _ in $(seq 600); do grep -q -F -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    echo "never ready: $1" >&2; cat "$1" >&2; return 1
}
workers() {  # ENDPOINT TRANSPORT: the number of workers the broker there has registered
    "$PYTHON" -c 'import sys, doc_session; print(doc_session.workers(sys.argv[1], sys.argv[2]))' "$1" "$2"
}
registered() {  # ENDPOINT TRANSPORT BEFORE: wait (up to 60 s) until more than BEFORE workers are registered
    for _ in $(seq 300); do [ "$(workers "$1" "$2")" -gt "$3" ] && return 0; sleep 0.2; done
    echo "no worker registered at $1" >&2; return 1
}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def workers(endpoint: str, transport: str) -> int:
    """How many workers the broker at ``endpoint`` has registered (its status report)."""
    with Client(endpoint, transport, default_timeout=30) as client:
        return int(client.status()["broker"]["worker_count"])


def localised(text: str, folder: Path, ports: dict[str, str]) -> str:
    """``text`` with its ports replaced by free ones (the same port, the same replacement) and /tmp/ by ``folder``."""

    def port(match: re.Match[str]) -> str:
        return ports.setdefault(match.group(1), str(free_port()))

    return PORT.sub(port, text).replace("/tmp/", f"{folder}/")


def script(text: str, folder: Path) -> str:
    """The bash script that runs the block's ``text``: serving commands in the background, each waited for."""
    lines = [PRELUDE]
    logical = text.replace("\\\n", " ").splitlines()
    for number, line in enumerate(logical):
        words = shlex.split(line, comments=True)
        if not words:
            continue
        command = words[1] if words[0] == "generaldomo" and len(words) > 1 else None
        log = folder / f"serving-{number}.log"
        if command in SERVING:
            if command == "broker" and not {"--bind", "--router", "--server"} & set(words):
                line = f'GENERALDOMO_BIND="$GENERALDOMO_BROKER" {line}'  # where it binds by default, on a free port
            lines.append(f"{line} > {log} 2>&1 &")
            lines.append(f"ready {log} {shlex.quote(SERVING[command])}")
        elif command == "worker":
            connect = words[words.index("--connect") + 1] if "--connect" in words else "$GENERALDOMO_BROKER"
            transport = words[words.index("--transport") + 1] if "--transport" in words else "router"
            lines.append(f'before=$(workers "{connect}" {transport})')
            lines.append(f"{line} > {log} 2>&1 &")
            lines.append(f'registered "{connect}" {transport} $before')
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def run(text: str, folder: Path, ports: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run the block's ``text`` in ``folder`` (see the module); its output. AssertionError unless it succeeds."""
    ports = {} if ports is None else ports
    default = ports.setdefault("5555", str(free_port()))
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "generaldomo"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m generaldomo "$@"\n')
    shim.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "GENERALDOMO_BROKER": f"tcp://127.0.0.1:{default}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    path = folder / "block.sh"
    path.write_text(script(localised(text, folder, ports), folder))
    process = subprocess.Popen(
        ["bash", str(path)], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        stop(process.pid)
    logs = "".join(f"\n--- {log.name}\n{log.read_text()}" for log in sorted(folder.glob("serving-*.log")))
    assert process.returncode == 0, f"{path.read_text()}\n--- stdout\n{out}\n--- stderr\n{err}{logs}"
    return out


def stop(group: int) -> None:
    """SIGTERM to the script's process group (what it started in the background), SIGKILL to what outlives 60 s."""
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(600):
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(group, signal.SIGKILL)
