"""Where the C++ library is: the headers installed with the package, their pkg-config file and CMake config.

The wheel carries the repository's ``cpp/`` folder here (``setup.py`` copies it as package data) as a prefix of
the usual layout: ``include/generaldomo/*.hpp``, ``lib/pkgconfig/generaldomo.pc`` and
``lib/cmake/generaldomo/``. Both files name libzmq as a dependency, which is the project's static draft build
(:func:`generaldomo.draft.libzmq_prefix`, built when first asked for) or any libzmq installed with drafts.
``python -m generaldomo.cpp`` prints the paths and flags (``--help``)::

    export PKG_CONFIG_PATH=$(python -m generaldomo.cpp --pkg-config-path)
    c++ -std=c++17 -O2 example.cpp $(pkg-config --cflags --libs generaldomo) -o example

    cmake -DCMAKE_PREFIX_PATH="$(python -m generaldomo.cpp --cmake-prefix-path)" ..  # find_package(generaldomo)

This module only finds files; it builds nothing but what :mod:`generaldomo.draft` builds.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cflags", "cmake_prefix_path", "include_dir", "libs", "libzmq_prefix", "pkg_config_path", "prefix"]

HERE = Path(__file__).resolve().parent
SOURCE_TREE = HERE.parents[1] / "cpp"  # a clone of the repository, where nothing was installed


def prefix() -> Path:
    """The folder holding ``include/`` and ``lib/`` of the C++ library: the installed package's, or the source
    tree's ``cpp/`` when generaldomo runs from a clone.

    Example::

        $ python -m generaldomo.cpp --prefix
    """
    for candidate in (HERE, SOURCE_TREE):
        if (candidate / "include" / "generaldomo" / "generaldomo.hpp").is_file():
            return candidate
    raise FileNotFoundError(f"the C++ headers are neither in {HERE} nor in {SOURCE_TREE}: reinstall generaldomo")


def include_dir() -> Path:
    """The folder to give the compiler with ``-I`` (it holds ``generaldomo/generaldomo.hpp``).

    Example:
        >>> from generaldomo import cpp
        >>> (cpp.include_dir() / "generaldomo" / "client.hpp").is_file()
        True
    """
    return prefix() / "include"


def libzmq_prefix(system: bool = False) -> Path | None:
    """The project's draft libzmq prefix (built if needed), or None with ``system`` (an installed libzmq).

    Args:
        system: use an installed libzmq instead (then None).

    Example::

        prefix = libzmq_prefix()  # builds the draft libzmq on first use (a minute or two)
    """
    if system:
        return None
    from generaldomo import draft

    return draft.libzmq_prefix()


def pkg_config_path(system_libzmq: bool = False) -> str:
    """A ``PKG_CONFIG_PATH`` value under which ``pkg-config generaldomo`` works: the package's ``.pc`` folder,
    the draft libzmq's (unless ``system_libzmq``), then the caller's ``PKG_CONFIG_PATH``.

    Args:
        system_libzmq: leave the draft libzmq's folder out (for a libzmq installed with drafts).

    Example::

        $ export PKG_CONFIG_PATH=$(python -m generaldomo.cpp --pkg-config-path)
        $ c++ -std=c++17 example.cpp $(pkg-config --cflags --libs generaldomo) -o example
    """
    folders = [prefix() / "lib" / "pkgconfig"]
    if zmq_prefix := libzmq_prefix(system_libzmq):
        folders.append(zmq_prefix / "lib" / "pkgconfig")
    inherited = os.environ.get("PKG_CONFIG_PATH")
    return os.pathsep.join([*map(str, folders), *([inherited] if inherited else [])])


def cmake_prefix_path(system_libzmq: bool = False) -> str:
    """A ``CMAKE_PREFIX_PATH`` value (``;``-separated) under which ``find_package(generaldomo)`` works.

    Args:
        system_libzmq: as for :func:`pkg_config_path`.

    Example::

        $ cmake -S . -B build -DCMAKE_PREFIX_PATH="$(python -m generaldomo.cpp --cmake-prefix-path)"
    """
    prefixes = [prefix(), *filter(None, [libzmq_prefix(system_libzmq)])]
    return ";".join(map(str, prefixes))


def cflags(system_libzmq: bool = False) -> list[str]:
    """The compiler flags, as ``pkg-config --cflags generaldomo`` gives them (for machines without it).

    Args:
        system_libzmq: as for :func:`pkg_config_path`.

    Example::

        $ c++ -std=c++17 $(python -m generaldomo.cpp --cflags) example.cpp $(python -m generaldomo.cpp --libs)
    """
    zmq_prefix = libzmq_prefix(system_libzmq)
    zmq = [f"-I{zmq_prefix / 'include'}"] if zmq_prefix else []
    return [f"-I{include_dir()}", *zmq, "-DZMQ_BUILD_DRAFT_API", "-pthread"]


def libs(system_libzmq: bool = False) -> list[str]:
    """The linker flags, as ``pkg-config --libs generaldomo`` gives them (for machines without it).

    Args:
        system_libzmq: as for :func:`pkg_config_path`.

    Example::

        $ c++ -std=c++17 $(python -m generaldomo.cpp --cflags) example.cpp $(python -m generaldomo.cpp --libs)
    """
    zmq_prefix = libzmq_prefix(system_libzmq)
    return [*([f"-L{zmq_prefix / 'lib'}"] if zmq_prefix else []), "-lzmq", "-pthread"]
