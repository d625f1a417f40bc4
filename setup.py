"""Build the optional accelerators: the C accelerator of the broker links (generaldomo/io/_speedups.c) and the
compiled sans-IO core (the modules of generaldomo/sansio compiled with mypyc, into ``generaldomo/_compiled/``: see
generaldomo.compiled); and put the C++ library (the repository's ``cpp/``: headers, pkg-config file, CMake
config) into the package as ``generaldomo/cpp/``.

Everything else is declared in setup.cfg. Without a C compiler or mypyc, or if a build fails, the package installs
without that accelerator and runs its pure-Python path (``generaldomo doctor`` says which one is in use). The
build's knobs, environment variables:

- ``GENERALDOMO_NO_EXTENSIONS=1`` builds neither accelerator (a quick install for what does not run the broker's
  logic: tox's envs lint, docs and pure set it);
- ``GENERALDOMO_COMPILE_INPLACE=1`` makes ``setup.py build_ext --inplace`` compile the core too, into the source
  tree's ``generaldomo/_compiled/`` (without it, an in-place build is the C accelerator's alone: compiling the
  core takes minutes, and a source edited after it leaves the whole build unused).

The compiled core is checked before it is used: the build imports every compiled module in a fresh interpreter
(from the folder the build is in, never from a source tree), and writes its manifest only if all of them import.
"""

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
CPP = ROOT / "cpp"
# The compiled core: every module of generaldomo/sansio but these (and the packages' __init__ modules, which stay
# Python), each with why it is not compiled
NOT_COMPILED = {
    "generaldomo/sansio/broker/actions.py": "its records are NamedTuple subclasses, which mypyc does not compile",
    "generaldomo/sansio/broker/report.py": "its attrs records, made at import, are read back by cattrs",
    "generaldomo/sansio/broker/services/resolver.py": "NameResolver is the base class of users' resolvers",
    "generaldomo/sansio/broker/services/resolvers/attributes.py": "its resolver is a NameResolver",
    "generaldomo/sansio/broker/services/resolvers/balanced.py": "its resolver is a NameResolver",
    "generaldomo/sansio/subclassing.py": "it defines, where the code runs, what mypyc reads while it compiles",
}
COMPILED_LIBRARY = "generaldomo_core"  # the shared library's module: generaldomo_core__mypyc
COMPILE_INPLACE = "GENERALDOMO_COMPILE_INPLACE"  # set: build_ext --inplace compiles the core too (minutes)
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


def compiled_sources() -> list[Path]:
    """The modules of the compiled core (see NOT_COMPILED)."""
    return [
        path
        for path in sorted((ROOT / "generaldomo" / "sansio").rglob("*.py"))
        if path.name != "__init__.py" and path.relative_to(ROOT).as_posix() not in NOT_COMPILED
    ]


class OptionalBuildExt(build_ext):
    """Build the extensions if possible; warn and carry on without one if not. The compiled core's extensions
    (made here by mypyc, when it is there) go into ``generaldomo/_compiled/`` with their manifest, which is
    written only when all of them were built."""

    def finalize_options(self) -> None:
        """The compiled core's extensions join the others before the options of each are worked out."""
        self._compiled: dict[str, Path | None] = {}  # compiled core's extension name -> its source (None: library)
        self._failed: list[str] = []
        wanted = not self.inplace or os.environ.get(COMPILE_INPLACE, "") not in ("", "0")
        # (none: GENERALDOMO_NO_EXTENSIONS; in a source tree, whose edits leave a build unused, on request only)
        if self.distribution.ext_modules and wanted and not getattr(self.distribution, "_generaldomo_compiled", False):
            self.distribution._generaldomo_compiled = True  # (finalized once per build)
            self.distribution.ext_modules = [*self.distribution.ext_modules, *self._mypyc_extensions()]
        else:
            self._compiled = getattr(self.distribution, "_generaldomo_names", {})
        self.distribution._generaldomo_names = self._compiled
        super().finalize_options()

    def run(self) -> None:
        target = self._compiled_dir()
        (target / "manifest.json").unlink(missing_ok=True)  # an older build is not used while this one is made
        try:
            super().run()
        except Exception as error:  # no compiler, no Python headers: the pure-Python path stays
            self.warn(f"generaldomo: the accelerators were not built ({error}); using the pure-Python path")
            return
        if self._compiled and not self._failed:
            self._write_manifest(target)
            self._verify(target)

    def _verify(self, target: Path) -> None:
        """Import every compiled module in a fresh interpreter, from the package the build is in; remove the
        manifest (the build is not used) when one does not import as the compiled module."""
        package = target.parent
        modules = sorted(name for name, source in self._compiled.items() if source is not None)
        code = (
            "import sys, importlib, generaldomo.compiled as c\n"
            "assert c.in_use(), c.description()\n"
            "for name in sys.argv[1:]:\n"
            "    module = importlib.import_module(name)\n"
            "    assert not module.__file__.endswith('.py'), module.__file__\n"
        )
        env = {key: value for key, value in os.environ.items() if key != "GENERALDOMO_PURE_PYTHON"}
        env["PYTHONPATH"] = str(package.parent)
        done = subprocess.run(  # (from the build's folder: in a source tree, "" on sys.path is the sources)
            [sys.executable, "-c", code, *modules],
            capture_output=True,
            text=True,
            env=env,
            cwd=package.parent,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            (target / "manifest.json").unlink(missing_ok=True)
            error = (done.stderr.strip().splitlines() or ["no output"])[-1]
            self.warn(f"generaldomo: the compiled core does not import ({error}); using the pure-Python core")

    def _compiled_dir(self) -> Path:
        return (ROOT if self.inplace else Path(self.build_lib)) / "generaldomo" / "_compiled"

    def _mypyc_extensions(self) -> list[Extension]:
        """The compiled core's extensions (mypyc generates their C under build/), none without mypyc."""
        try:
            from mypyc.build import mypycify
        except ImportError as error:
            self.warn(f"generaldomo: the compiled core was not built ({error}); using the pure-Python core")
            return []
        sources = compiled_sources()
        self.distribution._generaldomo_digests = {
            path: hashlib.sha256(path.read_bytes()).hexdigest() for path in sources
        }
        cwd = os.getcwd()
        os.chdir(ROOT)  # mypyc names the modules by their paths from here
        try:
            extensions = mypycify(
                [path.relative_to(ROOT).as_posix() for path in sources],
                opt_level="3",
                target_dir=os.path.join("build", "mypyc"),
                group_name=COMPILED_LIBRARY,
            )
        except (Exception, SystemExit) as error:  # (mypyc exits on a type error)
            self.warn(f"generaldomo: the compiled core was not built ({error}); using the pure-Python core")
            return []
        finally:
            os.chdir(cwd)
        by_name = {".".join(path.relative_to(ROOT).with_suffix("").parts): path for path in sources}
        for extension in extensions:
            self._compiled[extension.name] = by_name.get(extension.name)
            extension.optional = True
            # mypyc's sources are relative to the root
            extension.sources = [src if os.path.isabs(src) else str(ROOT / src) for src in extension.sources]
            extension.include_dirs = [d if os.path.isabs(d) else str(ROOT / d) for d in extension.include_dirs]
        return extensions

    def get_ext_fullpath(self, ext_name: str) -> str:
        if ext_name in getattr(self, "_compiled", {}):
            return str(Path(self.build_lib) / "generaldomo" / "_compiled" / self.get_ext_filename(ext_name))
        return super().get_ext_fullpath(ext_name)

    def _get_inplace_equivalent(self, build_py: Any, ext: Extension) -> tuple[str, str]:
        if ext.name in getattr(self, "_compiled", {}):  # (--inplace: into the tree's _compiled/, not beside a source)
            inplace = ROOT / "generaldomo" / "_compiled" / self.get_ext_filename(ext.name)
            inplace.parent.mkdir(parents=True, exist_ok=True)  # (copied there, as a file into a folder)
            return str(inplace), self.get_ext_fullpath(ext.name)
        return super()._get_inplace_equivalent(build_py, ext)

    def _write_manifest(self, target: Path) -> None:
        spec = importlib.util.spec_from_file_location("generaldomo_compiled", ROOT / "generaldomo" / "compiled.py")
        assert spec is not None and spec.loader is not None
        compiled = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = compiled  # (its records need their module while they are made)
        spec.loader.exec_module(compiled)
        Manifest = compiled.Manifest
        library = next(name for name, source in self._compiled.items() if source is None)
        modules = {
            name: (
                self.get_ext_filename(name),
                source.relative_to(ROOT).as_posix(),
                self.distribution._generaldomo_digests[source],
            )
            for name, source in self._compiled.items()
            if source is not None
        }
        (target / "manifest.json").write_text(Manifest(library, self.get_ext_filename(library), modules).to_json())

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:
            self._failed.append(ext.name)
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
