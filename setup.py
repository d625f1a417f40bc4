"""Build the optional C accelerator of the broker links (generaldomo/io/_speedups.c), and put the C++ library
(the repository's ``cpp/``: headers, pkg-config file, CMake config) into the package as ``generaldomo/cpp/``.

Everything else is declared in setup.cfg. Without a C compiler, or if the build fails, the package installs
without the accelerator and runs its pure-Python path (``generaldomo doctor`` says which one is in use).
"""

import os
import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

CPP = Path(__file__).resolve().parent / "cpp"
CPP_FILES = ("include/generaldomo/*.hpp", "lib/pkgconfig/*.pc", "lib/cmake/generaldomo/*.cmake")


class BuildPyWithCpp(build_py):
    """Copy the C++ library's files into the built package, under ``generaldomo/cpp/`` (see generaldomo.cpp)."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "generaldomo" / "cpp"
        for pattern in CPP_FILES:
            for source in sorted(CPP.glob(pattern)):
                destination = target / source.relative_to(CPP)
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, destination)


class OptionalBuildExt(build_ext):
    """Build the extension if possible; warn and carry on without it if not."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # no compiler, no Python headers: the pure-Python path stays
            self.warn(f"generaldomo: the C accelerator was not built ({error}); using the pure-Python path")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:
            self.warn(f"generaldomo: building {ext.name} failed ({error}); using the pure-Python path")


SPEEDUPS = Extension(
    "generaldomo.io._speedups",
    sources=["generaldomo/io/_speedups.c"],
    libraries=["dl"],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    optional=True,
)

setup(
    ext_modules=[] if os.environ.get("GENERALDOMO_NO_EXTENSIONS") else [SPEEDUPS],
    cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyWithCpp},
)
