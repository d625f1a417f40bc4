"""Build the optional C accelerator of the broker links (generaldomo/io/_speedups.c).

Everything else is declared in setup.cfg. Without a C compiler, or if the build fails, the package installs
without the accelerator and runs its pure-Python path (``generaldomo doctor`` says which one is in use).
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


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
    cmdclass={"build_ext": OptionalBuildExt},
)
