"""Compile the C Majordomo test peers against the project's static, draft-enabled libzmq.

One source per role (``mdp_client.c``, ``mdp_worker.c``), compiled once per dialect (``-DMDP_DIALECT=1`` for
MDP/0.1, ``2`` for MDP/0.2) into ``mdp01_client``, ``mdp01_worker``, ``mdp02_client`` and ``mdp02_worker``.

``python tests/interop/build.py OUT_DIR`` builds them from the command line and prints their paths.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROLES = ("client", "worker")
DIALECTS = (1, 2)  # MDP/0.1, MDP/0.2
PEERS = tuple(f"mdp0{dialect}_{role}" for dialect in DIALECTS for role in ROLES)
HEADERS = (HERE / "mdp_common.h",)
CFLAGS = ("-O2", "-Wall", "-Wextra")


class BuildError(RuntimeError):
    """A peer could not be built; the message carries the command and the compiler's output."""


def libzmq_prefix() -> Path:
    """The prefix holding ``include/zmq.h`` and ``lib/libzmq.a``.

    ``$GENERALDOMO_LIBZMQ_PREFIX`` if set, else ``python -m generaldomo.draft libzmq-prefix`` (which builds it if
    needed).
    """
    prefix = os.environ.get("GENERALDOMO_LIBZMQ_PREFIX")
    if not prefix:
        cmd = [sys.executable, "-m", "generaldomo.draft", "libzmq-prefix"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        if proc.returncode:
            raise BuildError(f"`{shlex.join(cmd)}` failed (exit {proc.returncode}):\n{proc.stderr}")
        prefix = proc.stdout.strip().splitlines()[-1]
    path = Path(prefix)
    for needed in ("include/zmq.h", "lib/libzmq.a"):
        if not (path / needed).is_file():
            raise BuildError(f"libzmq prefix {path} has no {needed}")
    return path


def _up_to_date(target: Path, sources: list[Path]) -> bool:
    return target.exists() and all(target.stat().st_mtime >= source.stat().st_mtime for source in sources)


@contextmanager
def one_builder(target: Path) -> Iterator[Path]:
    """Build ``target`` one process at a time (the processes of ``pytest -n``, a bench run beside the tests): the
    caller checks whether it is up to date and writes the path this yields, which replaces ``target`` whole on
    success, so that no process ever runs a half-written program."""
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        partial = target.parent / f".{target.name}.{os.getpid()}"
        try:
            yield partial
            if partial.exists():
                os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)


def _compile(cc: list[str], source: Path, target: Path, prefix: Path) -> None:
    archive = prefix / "lib" / "libzmq.a"
    with one_builder(target) as partial:
        if _up_to_date(target, [source, *HEADERS, archive]):
            return
        cmd = [*cc, *CFLAGS, f"-I{prefix / 'include'}", str(source), str(archive), "-lstdc++", "-lpthread"]
        cmd += ["-o", str(partial)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise BuildError(f"cannot run the C compiler `{shlex.join(cmd)}`: {error}") from error
        if proc.returncode:
            raise BuildError(
                f"compiling {source.name} failed (exit {proc.returncode}):\n$ {shlex.join(cmd)}\n{proc.stderr}"
            )
        if proc.stderr.strip():  # the peers are meant to build warning-free
            warnings.warn(f"compiler warnings for {source.name}:\n{proc.stderr}", stacklevel=1)


Compile = Callable[[list[str], Path, Path, Path], None]  # (compiler, source, target, libzmq prefix)


def build_all(
    out_dir: Path | str, sources: dict[str, Path], compiler: list[str], compile_one: Compile
) -> dict[str, Path]:
    """Compile ``sources`` (``{name: source}``) into ``out_dir`` in parallel, each with ``compile_one`` against the
    project's libzmq; return ``{name: executable}``. The first failure is raised."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prefix = libzmq_prefix()
    targets = {name: out / name for name in sources}
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        jobs = [pool.submit(compile_one, compiler, sources[name], path, prefix) for name, path in targets.items()]
        for job in jobs:
            job.result()
    return targets


def build_peers(out_dir: Path | str) -> dict[str, Path]:
    """Compile every peer into ``out_dir`` (skipping up-to-date ones); return ``{name: executable}``.

    The compiler is ``$CC`` (default ``cc``). Raises :class:`BuildError` if anything fails.
    """
    cc = shlex.split(os.environ.get("CC") or "cc")
    built: dict[str, Path] = {}
    for dialect in DIALECTS:
        sources = {f"mdp0{dialect}_{role}": HERE / f"mdp_{role}.c" for role in ROLES}
        built |= build_all(out_dir, sources, [*cc, f"-DMDP_DIALECT={dialect}"], _compile)
    return built


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR")
    for name, path in build_peers(sys.argv[1]).items():
        print(f"{name} {path}")
