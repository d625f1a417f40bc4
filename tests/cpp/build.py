"""Compile the C++ test programs (``tests/cpp/*.cpp``) against the header-only library in ``cpp/include`` and
the project's static, draft-enabled libzmq (the prefix that :func:`interop.build.libzmq_prefix` finds).

The compiler is ``$CXX`` (default ``c++``), with ``-std=c++17 -O2 -Wall -Wextra -pthread``; any compiler output
is an error, so the library stays warning-free. ``python tests/cpp/build.py OUT_DIR`` builds them from the
command line and prints their paths.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: make tests/ importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interop.build import BuildError, build_all, libzmq_prefix

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
INCLUDE = ROOT / "cpp" / "include"
PROGRAMS = ("gd_client", "gd_worker", "gd_protocol")
CXXFLAGS = ("-std=c++17", "-O2", "-Wall", "-Wextra", "-pthread")


def _headers() -> list[Path]:
    return sorted(INCLUDE.glob("generaldomo/*.hpp")) + sorted(HERE.glob("*.hpp"))


def _up_to_date(target: Path, sources: list[Path]) -> bool:
    return target.exists() and all(target.stat().st_mtime >= source.stat().st_mtime for source in sources)


def _compile(cxx: list[str], source: Path, target: Path, prefix: Path) -> None:
    archive = prefix / "lib" / "libzmq.a"
    if _up_to_date(target, [source, *_headers(), archive]):
        return
    cmd = [*cxx, *CXXFLAGS, f"-I{INCLUDE}", f"-I{prefix / 'include'}", str(source), str(archive), "-o", str(target)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BuildError(f"cannot run the C++ compiler `{shlex.join(cmd)}`: {error}") from error
    if proc.returncode or proc.stderr.strip():
        target.unlink(missing_ok=True)
        raise BuildError(
            f"compiling {source.name} failed or warned (exit {proc.returncode}):\n$ {shlex.join(cmd)}\n{proc.stderr}"
        )


def build_source(source: Path, target: Path) -> Path:
    """Compile one C++ program (e.g. the README's example) as the test programs are; return ``target``."""
    _compile(shlex.split(os.environ.get("CXX") or "c++"), source, target, libzmq_prefix())
    return target


def build_programs(out_dir: Path | str) -> dict[str, Path]:
    """Compile every program into ``out_dir`` (skipping up-to-date ones); return ``{name: executable}``.

    Raises :class:`~interop.build.BuildError` if anything fails or the compiler warns.
    """
    cxx = shlex.split(os.environ.get("CXX") or "c++")
    return build_all(out_dir, {name: HERE / f"{name}.cpp" for name in PROGRAMS}, cxx, _compile)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR")
    for name, path in build_programs(sys.argv[1]).items():
        print(f"{name} {path}")
