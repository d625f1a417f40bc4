"""``python -m generaldomo.cpp``: where the C++ headers, pkg-config file and CMake config are (see the package)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from generaldomo import cpp

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Print what each flag asks for, one line each, in the order given; with no flag, the include folder."""
    parser = argparse.ArgumentParser(
        prog="python -m generaldomo.cpp", description="where generaldomo's C++ library is, and how to build with it"
    )
    shown = parser.add_argument_group("what to print (in the order given)")
    for flag, what in (
        ("--include", "the folder to pass with -I (it holds generaldomo/generaldomo.hpp); the default"),
        ("--prefix", "the library's prefix (include/, lib/pkgconfig/, lib/cmake/generaldomo/)"),
        ("--pkg-config-path", "a PKG_CONFIG_PATH under which `pkg-config generaldomo` works"),
        ("--cmake-prefix-path", "a CMAKE_PREFIX_PATH under which `find_package(generaldomo)` works"),
        ("--cflags", "the compiler flags (what pkg-config --cflags generaldomo prints)"),
        ("--libs", "the linker flags (what pkg-config --libs generaldomo prints)"),
    ):
        shown.add_argument(flag, dest="show", action="append_const", const=flag[2:], help=what)
    parser.add_argument(
        "--system-libzmq",
        action="store_true",
        help="use a libzmq installed with drafts (found by pkg-config or the compiler) instead of the project's "
        "static draft build (which is built on first use, like python -m generaldomo.draft libzmq-prefix)",
    )
    args = parser.parse_args(argv)
    system = args.system_libzmq
    answers = {
        "include": lambda: str(cpp.include_dir()),
        "prefix": lambda: str(cpp.prefix()),
        "pkg-config-path": lambda: cpp.pkg_config_path(system),
        "cmake-prefix-path": lambda: cpp.cmake_prefix_path(system),
        "cflags": lambda: shlex.join(cpp.cflags(system)),
        "libs": lambda: shlex.join(cpp.libs(system)),
    }
    try:
        for name in args.show or ["include"]:
            print(answers[name]())
    except (OSError, RuntimeError) as error:  # no headers, or the draft libzmq cannot be built here
        print(f"generaldomo.cpp: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
