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

from interop.build import BuildError, build_all, libzmq_prefix, one_builder

from generaldomo.cli.embedded import build_flags

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
INCLUDE = ROOT / "cpp" / "include"
PROGRAMS = ("gd_client", "gd_worker", "gd_protocol", "gd_bridge")
EMBEDDED = ("gd_embedded",)  # programs with the embedded broker: linked with libpython and pyzmq's libzmq
CXXFLAGS = ("-std=c++17", "-O2", "-Wall", "-Wextra", "-pthread")


def _headers() -> list[Path]:
    return sorted(INCLUDE.glob("generaldomo/*.hpp")) + sorted(HERE.glob("*.hpp"))


def _up_to_date(target: Path, sources: list[Path]) -> bool:
    return target.exists() and all(target.stat().st_mtime >= source.stat().st_mtime for source in sources)


def _compile(cxx: list[str], source: Path, target: Path, prefix: Path) -> None:
    archive = str(prefix / "lib" / "libzmq.a")
    _run_compiler(cxx, source, target, [f"-I{INCLUDE}", f"-I{prefix / 'include'}"], [archive], [archive])


def _run_compiler(
    cxx: list[str], source: Path, target: Path, include: list[str], libs: list[str], inputs: list[str]
) -> None:
    """Compile ``source`` into ``target`` unless it is newer than the source, the headers and ``inputs``."""
    with one_builder(target) as partial:
        if _up_to_date(target, [source, *_headers(), *map(Path, inputs)]):
            return
        cmd = [*cxx, *CXXFLAGS, *include, str(source), *libs, "-o", str(partial)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise BuildError(f"cannot run the C++ compiler `{shlex.join(cmd)}`: {error}") from error
        if proc.returncode or proc.stderr.strip():
            target.unlink(missing_ok=True)
            raise BuildError(
                f"compiling {source.name} failed or warned (exit {proc.returncode}):\n$ {shlex.join(cmd)}\n"
                f"{proc.stderr}"
            )


def _compile_embedded(
    cxx: list[str], source: Path, target: Path, prefix: Path, libzmq: list[str] | None = None
) -> None:
    """Compile a program using ``embedded.hpp`` against the Python that runs this (sys.executable's build flags,
    :func:`generaldomo.cli.embedded.build_flags`) and pyzmq's libzmq, or the ``libzmq`` flags given."""
    flags = build_flags(prefix)
    libs = [*(flags.libzmq if libzmq is None else libzmq), *flags.python]
    _run_compiler(cxx, source, target, [*flags.include, f"-I{INCLUDE}"], libs, [flags.libzmq[0]])


def build_source(source: Path, target: Path) -> Path:
    """Compile one C++ program (e.g. the guide's example) as the test programs are; return ``target``."""
    _compile(shlex.split(os.environ.get("CXX") or "c++"), source, target, libzmq_prefix())
    return target


def build_programs(out_dir: Path | str) -> dict[str, Path]:
    """Compile every program into ``out_dir`` (skipping up-to-date ones); return ``{name: executable}``.

    Raises :class:`~interop.build.BuildError` if anything fails or the compiler warns.
    """
    cxx = shlex.split(os.environ.get("CXX") or "c++")
    built = build_all(out_dir, {name: HERE / f"{name}.cpp" for name in PROGRAMS}, cxx, _compile)
    return built | build_all(out_dir, {name: HERE / f"{name}.cpp" for name in EMBEDDED}, cxx, _compile_embedded)


def build_embedded(source: Path, target: Path, libzmq: list[str] | None = None) -> Path:
    """Compile one program using ``embedded.hpp`` (e.g. the guide's example; ``libzmq``: other flags than pyzmq's
    extension, to show what a second libzmq does); return ``target``."""
    _compile_embedded(shlex.split(os.environ.get("CXX") or "c++"), source, target, libzmq_prefix(), libzmq)
    return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR")
    for name, path in build_programs(sys.argv[1]).items():
        print(f"{name} {path}")
