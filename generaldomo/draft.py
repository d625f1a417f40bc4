"""Install a pyzmq built against libzmq with the DRAFT API (zmq.CLIENT/SERVER), for the ``server`` transport.

PyPI's pyzmq wheels and Debian's libzmq lack draft sockets, so this builds a wheel from PyPI sources with the
local C/C++ compiler, caches it, and installs it into the running interpreter's environment:

1. ``pip download`` the pyzmq 25.1.2 sdist, which carries the libzmq 4.3.4 sources under ``bundled/zeromq``;
2. apply the patches of ``generaldomo/patches`` to that source tree (:data:`PATCHES`, the one place the libzmq
   sources are changed: unified diffs shipped as package data, each saying first what it changes and why, and
   ``platform.patch`` the build's configuration); each hunk must match exactly, with no fuzz and no offset, or
   the build stops naming the file and line that differ;
3. ``pip download`` the PyNaCl 1.6.2 sdist, which carries the libsodium 1.0.20 sources under
   ``src/libsodium``, and build them (``./configure --disable-shared --with-pic``, ``make``) into a static
   ``libsodium.a`` for CURVE;
4. compile libzmq (``-O3``, drafts on, CURVE on libsodium) into a static, position-independent ``libzmq.a``
   that holds libsodium's objects too (C programs linking it need nothing else);
5. ``pip wheel`` pyzmq 27.3.0 from its sdist against that prefix: libzmq is linked statically into the
   extension, so the wheel is self-contained.

Why libsodium, and from PyNaCl's sdist: libzmq's bundled tweetnacl (its CURVE without libsodium) is a reference
implementation, about 13 MB/s here: 64 KiB CURVE requests through the broker ran at about 100/s, a tenth of
plaintext. libsodium's optimised code removes that. Its sources come from a package registry like libzmq's
(PyPI: PyNaCl's sdist bundles the libsodium release it binds), so that the build needs nothing but PyPI and a
compiler on any machine (Debian's ``libsodium-dev`` would need apt, root and a Debian system). ``make`` and a
POSIX shell are needed for libsodium's ``configure``.

The wheel is cached in ``$GENERALDOMO_CACHE`` (default ``~/.cache/generaldomo``) under
``pyzmq-draft/<python>-<platform>-<recipe>/``, the recipe naming the versions, the build's revision, each
patch and a digest of their diffs (:func:`recipe`): a changed diff builds another wheel, a reworded description
does not. Linux with glibc, a C and a C++ compiler only; elsewhere it
says what to do instead. It prints what it will do (versions, environment, what it replaces) before doing it.

Why libzmq 4.3.4 and not 4.3.5 (the release PyPI's wheels ship): no distribution on PyPI carries the 4.3.5
sources. pyzmq's sdists bundled them up to 25.1.2 (libzmq 4.3.4); pyzmq 26.0.0 and later sdists hold none
(their build downloads libzmq from GitHub, which a machine that reaches only package registries cannot); the
one PyPI package with libzmq 4.3.5 (comma-deps-zeromq, Python 3.12 and later) ships a prebuilt ``libzmq.a``
without the draft API (no ``zmq_msg_set_routing_id``), not sources that could be patched and built (checked
2026-12-01). Measured on the project's shared 2-vCPU
machine (pyzmq 27.3.0 both; DEALER to ROUTER echo in two processes over loopback tcp, 16 B, 10,000 sync round
trips then 100,000 with 100 in flight; medians of 6 interleaved rounds), this static 4.3.4 is not slower than
PyPI's 4.3.5 wheel: 11,620 against 11,342 sync req/s, 77,768 against 70,855 pipelined, 18.2 against 17.5 µs
of CPU per round trip (both processes), all within the rounds' spread of about 25 %. 4.3.5's changes are its
relicensing to MPL-2.0 and bug fixes. Point :data:`LIBZMQ_SDIST` at a pyzmq sdist that bundles 4.3.5 once
one exists.

Usage (``generaldomo doctor`` and every draft-socket error name the ``ensure`` command of your installation)::

    python -m generaldomo.draft plan           # say what ensure would do, do nothing
    python -m generaldomo.draft ensure         # install into this interpreter's environment if needed
    python -m generaldomo.draft build          # build/cache the wheel, print its path
    python -m generaldomo.draft libzmq-prefix  # the static libzmq it was built with (include/, lib/, lib/pkgconfig/)

This module imports only the standard library (not zmq, not the rest of generaldomo), so
``tools/draft_pyzmq.py`` runs it from a source tree where neither is installed. :func:`main` takes an argument
list, so the command line can offer it (``main(["ensure"])``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from subprocess import STDOUT
from typing import NamedTuple

__all__ = [
    "CFLAGS",
    "DRAIN_SYMBOL",
    "HUNK",
    "LIBZMQ_SDIST",
    "LIBZMQ_VERSION",
    "MAILBOX_SYMBOL",
    "MANUAL",
    "MARKERS",
    "PATCHES",
    "PATCH_DIR",
    "POLL_SYMBOL",
    "PROBE_CODE",
    "PYZMQ_VERSION",
    "RECIPE",
    "SKIP_PREFIXES",
    "SODIUM_SDIST",
    "SODIUM_SYMBOL",
    "SODIUM_VERSION",
    "VERIFY_CODE",
    "BuildError",
    "Env",
    "FileChange",
    "Hunk",
    "Installed",
    "Patch",
    "Unsupported",
    "apply_patches",
    "build_into",
    "build_libzmq",
    "build_sodium",
    "build_wheel",
    "cache_dir",
    "cached_wheel",
    "compile_all",
    "describe",
    "ensure",
    "environment",
    "fetch_libzmq_source",
    "fetch_sodium_source",
    "get_wheel",
    "install",
    "jobs",
    "libzmq_prefix",
    "locked",
    "log",
    "main",
    "only",
    "pip",
    "plan",
    "platform_problem",
    "probe",
    "read_patches",
    "recipe",
    "run",
    "unsupported",
]

PYZMQ_VERSION = "27.3.0"
LIBZMQ_SDIST = "25.1.2"  # the pyzmq sdist that bundles the libzmq sources
LIBZMQ_VERSION = "4.3.4"  # the libzmq release in that sdist
SODIUM_SDIST = "1.6.2"  # the PyNaCl sdist that bundles the libsodium sources
SODIUM_VERSION = "1.0.20"  # the libsodium release in that sdist


class BuildError(RuntimeError):
    """A step of the build, install or verification failed."""


class Unsupported(BuildError):
    """This platform cannot run the recipe; the message says what to do instead."""


PATCH_DIR = Path(__file__).resolve().parent / "patches"  # package data: one unified diff per change
HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# The symbols the patched libzmq exports, by which an installed pyzmq is known to carry the patches.
DRAIN_SYMBOL = "zmq_generaldomo_drain"  # drain.patch's (and ridguard.patch's, applied with it)
MAILBOX_SYMBOL = "zmq_generaldomo_mailbox_lock"  # mailbox.patch's: generaldomo.io.inproc binds real inproc then
POLL_SYMBOL = "zmq_generaldomo_poll_signaler"  # pollsig.patch's


@dataclass(frozen=True)
class Hunk:
    """One ``@@`` block of a unified diff: the ``old`` lines, from line ``start`` (after which, for none), become
    ``new``."""

    start: int
    old: tuple[str, ...]
    new: tuple[str, ...]
    lead: int = 0  # context lines before the first change, and after the last: a hunk with fewer after than
    trail: int = 0  # before ends the file (and fewer before than after starts it), as patch(1) reads it

    @property
    def at(self) -> int:
        """The index of the first old line in the unpatched file."""
        return self.start - 1 if self.old else self.start


@dataclass(frozen=True)
class FileChange:
    """The hunks of one file of the libzmq source tree (``created``: the diff's old side is ``/dev/null``)."""

    path: str  # relative to the libzmq source root, e.g. "src/router.cpp"
    hunks: tuple[Hunk, ...]
    created: bool = False

    def applied(self, lines: list[str], patch: str) -> list[str]:
        """``lines`` with every hunk applied where its header says, context included, with no fuzz and no offset;
        BuildError naming the first line that differs otherwise."""
        out, shift = list(lines), 0
        for hunk in self.hunks:
            at = hunk.at + shift
            found = out[at : at + len(hunk.old)]
            if found != list(hunk.old):
                line = next(n for n, (want, got) in enumerate(zip_longest(hunk.old, found)) if want != got)
                got = repr(found[line]) if line < len(found) else "the end of the file"
                raise self.refusal(patch, hunk, f"expects {hunk.old[line]!r} at line {at + line + 1}, found {got}")
            if hunk.trail < hunk.lead and at + len(found) != len(out):
                raise self.refusal(patch, hunk, f"ends the file, which goes on after line {at + len(found)}")
            if hunk.lead < hunk.trail and at != 0:
                raise self.refusal(patch, hunk, "starts the file, which has other lines before it")
            out[at : at + len(hunk.old)] = hunk.new
            shift += len(hunk.new) - len(hunk.old)
        return out

    def refusal(self, patch: str, hunk: Hunk, why: str) -> BuildError:
        """The error for a hunk that does not apply to this file."""
        return BuildError(
            f"{patch} does not apply to {self.path} of libzmq {LIBZMQ_VERSION}: its hunk at line {hunk.start} {why}"
        )


@dataclass(frozen=True)
class Patch:
    """One patch file: its name (the file's stem), what it says before its first ``---`` line (why the change),
    the diff from there on, and the file changes that diff makes."""

    name: str
    about: str
    diff: str
    changes: tuple[FileChange, ...]

    @classmethod
    def read(cls, path: Path) -> Patch:
        """The patch in ``path``; BuildError saying where it is not a unified diff."""
        return cls.parse(path.stem, path.read_text())

    @classmethod
    def parse(cls, name: str, text: str) -> Patch:
        """The patch ``text`` (a unified diff after free text); BuildError saying where it is not one."""
        lines = text.splitlines(keepends=True)
        first = next((n for n, line in enumerate(lines) if line.startswith("--- ")), len(lines))
        about, lines = "".join(lines[:first]).strip(), lines[first:]
        changes, n = [], 0

        def fail(why: str) -> BuildError:
            return BuildError(f"{name}.patch, line {first + n + 1}: {why}")

        while n < len(lines):
            if not (lines[n].startswith("--- ") and n + 1 < len(lines) and lines[n + 1].startswith("+++ ")):
                raise fail(f"expected a '--- a/FILE' and '+++ b/FILE' pair, found {lines[n]!r}")
            old, new = _diff_path(lines[n][4:]), _diff_path(lines[n + 1][4:])
            if new is None:
                raise fail("a patch may change or create files, not delete them")
            n += 2
            hunks = []
            while n < len(lines) and (header := HUNK.match(lines[n])):
                start, old_count, new_count = int(header[1]), int(header[2] or 1), int(header[4] or 1)
                n += 1
                before: list[str] = []
                after: list[str] = []
                tags = ""
                while len(before) < old_count or len(after) < new_count:
                    if n == len(lines):
                        raise fail("the file ends inside a hunk")
                    tag, rest = lines[n][:1], lines[n][1:]
                    tags += tag if tag in "-+" else " "
                    if tag in (" ", "\n"):  # context ("\n": an empty context line whose space an editor dropped)
                        before.append(rest or "\n")
                        after.append(rest or "\n")
                    elif tag == "-":
                        before.append(rest)
                    elif tag == "+":
                        after.append(rest)
                    else:
                        raise fail(f"{lines[n]!r} is not a line of a hunk (' ', '-' or '+')")
                    n += 1
                if (len(before), len(after)) != (old_count, new_count):
                    raise fail(f"the hunk at line {start} does not hold the {old_count} and {new_count} lines it says")
                lead, trail = len(tags) - len(tags.lstrip()), len(tags) - len(tags.rstrip())
                hunks.append(Hunk(start, tuple(before), tuple(after), lead, trail))
            if not hunks:
                raise fail(f"no hunk for {new}")
            changes.append(FileChange(new, tuple(hunks), created=old is None))
        if not changes:
            raise BuildError(f"{name}.patch holds no diff")
        return cls(name, about, "".join(lines), tuple(changes))

    def apply(self, src: Path) -> None:
        """Apply to the libzmq source tree ``src``, every hunk exactly where it says; BuildError naming the file
        and line where one does not match (and nothing written then)."""
        results: dict[str, list[str]] = {}
        for change in self.changes:
            target = src / change.path
            if change.created and target.exists():
                raise BuildError(f"{self.name}.patch creates {change.path}, which is there already")
            if change.path not in results:
                results[change.path] = [] if change.created else target.read_text().splitlines(keepends=True)
            results[change.path] = change.applied(results[change.path], f"{self.name}.patch")
        for path, lines in results.items():
            (src / path).write_text("".join(lines))


def _diff_path(field: str) -> str | None:
    """The path of a ``---``/``+++`` line's field without its ``a/``/``b/`` and timestamp (None: /dev/null)."""
    path = field.split("\t")[0].strip()
    if path == "/dev/null":
        return None
    return path.split("/", 1)[1] if path.startswith(("a/", "b/")) else path


def read_patches(folder: Path = PATCH_DIR) -> tuple[Patch, ...]:
    """The patches in ``folder`` (``*.patch``, in name order; each changes files of its own)."""
    return tuple(Patch.read(path) for path in sorted(folder.glob("*.patch")))


def recipe(patches: Sequence[Patch]) -> str:
    """The cache key's recipe part: the versions, the build's revision, each patch's name and a digest of their
    diffs, so that a changed diff (not a changed description) makes another wheel."""
    digest = hashlib.sha256()
    for patch in patches:
        digest.update(f"{patch.name}\0{patch.diff}\0".encode())
    names = "".join(f"+{patch.name}" for patch in patches)
    return f"pyzmq{PYZMQ_VERSION}-zmq{LIBZMQ_VERSION}-sodium{SODIUM_VERSION}-static-r2{names}-{digest.hexdigest()[:12]}"


PATCHES = read_patches()  # applied before compiling: the one place the libzmq sources are changed
RECIPE = recipe(PATCHES)

# Sources whose transports platform.patch leaves out (they would compile to nothing).
SKIP_PREFIXES = ("ws_", "wss_", "vmci", "gssapi_", "tipc_")
CFLAGS = ["-O3", "-DNDEBUG", "-fPIC", "-D_GNU_SOURCE", "-D_REENTRANT", "-D_THREAD_SAFE"]

# Run in a fresh interpreter after installing: drafts plus a CLIENT/SERVER round trip.
VERIFY_CODE = """\
import zmq
assert zmq.has("draft"), "zmq.has('draft') is False"
ctx = zmq.Context()
srv = ctx.socket(zmq.SERVER)
cli = ctx.socket(zmq.CLIENT)
for s in (srv, cli):
    s.rcvtimeo = s.sndtimeo = 5000
    s.linger = 0
srv.bind("inproc://draft-check")
cli.connect("inproc://draft-check")
cli.send(b"ping")
req = srv.recv(copy=False)
assert req.bytes == b"ping"
rep = zmq.Frame(b"pong")
rep.routing_id = req.routing_id
srv.send(rep)
assert cli.recv() == b"pong"
ctx.destroy()
print(f"pyzmq {zmq.pyzmq_version()}, libzmq {zmq.zmq_version()}, draft OK")
"""
# "patched": the libzmq carries PATCHES (each marker symbol is there) and CURVE runs on libsodium, so that an
# environment holding an older wheel of this recipe is upgraded. libzmq calls libsodium's
# ``crypto_box_easy_afternm`` only when built on it (its tweetnacl defines a ``sodium_init`` of its own).
SODIUM_SYMBOL = "crypto_box_easy_afternm"
MARKERS = (DRAIN_SYMBOL, MAILBOX_SYMBOL, POLL_SYMBOL, SODIUM_SYMBOL)
PROBE_CODE = f"""\
import ctypes, zmq
try:
    from zmq.backend.cython import _zmq
    lib = ctypes.CDLL(_zmq.__file__)
    patched = all(hasattr(lib, name) for name in {MARKERS!r})
except (ImportError, OSError):
    patched = False
print(zmq.has('draft'), zmq.__version__, zmq.zmq_version(), patched)
"""

_T0 = time.monotonic()
Env = Mapping[str, str]


class Installed(NamedTuple):
    """What the interpreter's ``import zmq`` gives (``pyzmq`` empty when it does not import)."""

    pyzmq: str
    libzmq: str
    draft: bool
    patched: bool = False  # the libzmq carries this recipe's PATCHES

    @property
    def current(self) -> bool:
        """True when nothing needs installing: draft sockets and this recipe's patches are there."""
        return self.draft and self.patched


MANUAL = (
    "build libzmq 4.3.x with drafts yourself (CMake -DENABLE_DRAFTS=ON, or ./configure --enable-drafts), then "
    "`ZMQ_PREFIX=<its install prefix> ZMQ_DRAFT_API=1 pip install --force-reinstall --no-binary pyzmq pyzmq`; "
    "or use the router transport, which needs no draft sockets"
)


def unsupported(system: str, libc: str, compilers: Mapping[str, str | None]) -> str | None:
    """Why this recipe cannot run on a platform (``sys.platform``, libc name, compiler paths), or None."""
    if not system.startswith("linux"):
        return f"this installer builds on Linux with glibc only, not on {system}: {MANUAL}"
    if libc != "glibc":
        return f"this installer builds on Linux with glibc only, not with {libc or 'an unknown'} libc: {MANUAL}"
    missing = [name for name, path in compilers.items() if not path]
    if missing:
        return (
            f"no {' or '.join(missing)} compiler found (set $CC/$CXX, or install them: Debian/Ubuntu "
            "`apt-get install g++`, Fedora `dnf install gcc-c++`), then run again"
        )
    return None


def platform_problem() -> str | None:
    """:func:`unsupported` for the running machine."""
    cc, cxx = os.environ.get("CC", "cc"), os.environ.get("CXX", "c++")
    compilers = {f"C ({cc})": shutil.which(cc.split()[0]), f"C++ ({cxx})": shutil.which(cxx.split()[0])}
    return unsupported(sys.platform, platform.libc_ver()[0], compilers)


def log(msg: str) -> None:
    """Print a progress line with the elapsed time to stderr."""
    elapsed = time.monotonic() - _T0
    print(f"[generaldomo.draft {elapsed:5.1f}s] {msg}", file=sys.stderr, flush=True)


def jobs() -> int:
    """Number of parallel compile jobs."""
    return int(os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or os.cpu_count() or 2)


def cache_dir() -> Path:
    """Cache folder keyed by interpreter, platform and recipe."""
    default = Path.home() / ".cache" / "generaldomo"
    root = Path(os.environ.get("GENERALDOMO_CACHE") or default)
    key = f"{sys.implementation.cache_tag}-{sysconfig.get_platform()}-{RECIPE}"
    return root / "pyzmq-draft" / key


def pip(*args: str | Path) -> list[str]:
    """A pip command line for the current interpreter."""
    return [sys.executable, "-m", "pip", *map(str, args)]


def run(cmd: Sequence[str | Path], log_to: Path, env: Env | None = None, cwd: Path | None = None) -> None:
    """Run ``cmd`` (in ``cwd``), appending its output to ``log_to``; BuildError on failure."""
    with log_to.open("ab") as out:
        argv = [str(c) for c in cmd]
        try:
            proc = subprocess.run(argv, check=False, stdout=out, stderr=STDOUT, env=env, cwd=cwd)
        except FileNotFoundError as error:  # no such program (make, sh, cc)
            raise BuildError(f"cannot run {argv[0]}: {error}") from error
    if proc.returncode:
        tail = "\n".join(log_to.read_text(errors="replace").splitlines()[-40:])
        raise BuildError(f"exit {proc.returncode}: {' '.join(argv)}\n{tail}")


def only(paths: Iterable[Path], what: str) -> Path:
    """The single path in ``paths``; BuildError if there is not exactly one."""
    found = list(paths)
    if len(found) != 1:
        raise BuildError(f"expected one {what}, found {found}")
    return found[0]


def fetch_libzmq_source(work: Path) -> Path:
    """Download the pyzmq sdist bundling libzmq and extract ``bundled/zeromq``."""
    dl = work / "dl"
    # ZMQ_PREFIX=bundled skips a 10 s "no libzmq found" pause in its setup.py.
    env = {**os.environ, "ZMQ_PREFIX": "bundled"}
    cmd = pip("download", "--no-deps", "--no-binary", "pyzmq", "-d", dl)
    run([*cmd, f"pyzmq=={LIBZMQ_SDIST}"], work / "download.log", env)
    sdist = only(dl.glob("pyzmq-*.tar.gz"), "pyzmq sdist")
    top = f"pyzmq-{LIBZMQ_SDIST}/bundled/zeromq/"
    with tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(top)]
        tf.extractall(work, members=members, filter="data")
    return work / top


def fetch_sodium_source(work: Path) -> Path:
    """Download the PyNaCl sdist bundling libsodium and extract ``src/libsodium``."""
    dl = work / "dl-sodium"
    cmd = pip("download", "--no-deps", "--no-binary", "pynacl", "-d", dl)
    run([*cmd, f"pynacl=={SODIUM_SDIST}"], work / "download.log")
    sdist = only(dl.glob("[Pp]y[Nn]a[Cc]l-*.tar.gz"), "PyNaCl sdist")
    with tarfile.open(sdist) as tf:
        top = only({Path(m.name.split("/", 1)[0]) for m in tf.getmembers()}, "top folder of the PyNaCl sdist")
        prefix = f"{top.name}/src/libsodium/"
        tf.extractall(work, members=[m for m in tf.getmembers() if m.name.startswith(prefix)], filter="data")
    return work / prefix


def build_sodium(src: Path, work: Path) -> Path:
    """Build libsodium into a static PIC ``libsodium.a``; return its install prefix."""
    prefix, log_to = work / "sodium", work / "sodium.log"
    env = {**os.environ, "CFLAGS": "-O3"}
    flags = ["--disable-shared", "--enable-static", "--with-pic", "--disable-dependency-tracking"]
    run(["sh", "./configure", "--quiet", *flags, f"--prefix={prefix}"], log_to, env, cwd=src)
    run([os.environ.get("MAKE", "make"), f"-j{jobs()}", "install"], log_to, env, cwd=src)
    return prefix


def apply_patches(src: Path, patches: Sequence[Patch] = PATCHES) -> None:
    """Apply ``patches``, in order, to the libzmq source tree ``src`` (before anything is compiled); BuildError
    if one does not apply exactly (these are made for libzmq's :data:`LIBZMQ_VERSION` sources)."""
    for patch in patches:
        log(f"patching libzmq: {patch.name} ({', '.join(change.path for change in patch.changes)})")
        patch.apply(src)


def compile_all(cmds: Sequence[Sequence[str | Path]], log_to: Path) -> None:
    """Run the compile commands in parallel; the first failure cancels the rest."""
    with concurrent.futures.ThreadPoolExecutor(jobs()) as pool:
        futures = [pool.submit(run, cmd, log_to) for cmd in cmds]
        try:
            for fut in concurrent.futures.as_completed(futures):
                fut.result()
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise


def build_libzmq(src: Path, work: Path, sodium: Path) -> Path:
    """Compile libzmq (CURVE on the libsodium installed in ``sodium``) into a static PIC ``libzmq.a`` that holds
    libsodium's objects too; return its install prefix."""
    objdir, prefix, sodium_objects = work / "obj", work / "prefix", work / "sodium-obj"
    for d in (objdir, prefix / "lib", prefix / "include", sodium_objects):
        d.mkdir(parents=True)
    flags = [*CFLAGS, f"-I{src / 'include'}", f"-I{sodium / 'include'}"]  # src/platform.hpp: platform.patch
    cxx = [*os.environ.get("CXX", "c++").split(), "-std=gnu++11", *flags]
    cmds: list[list[str | Path]] = [
        [*cxx, "-c", f, "-o", objdir / f"{f.stem}.o"]
        for f in sorted((src / "src").glob("*.cpp"))
        if not f.name.startswith(SKIP_PREFIXES)
    ]
    log_to, ar = work / "libzmq.log", os.environ.get("AR", "ar")
    compile_all(cmds, log_to)
    run([ar, "x", sodium / "lib" / "libsodium.a"], log_to, cwd=sodium_objects)
    objects = sorted(objdir.glob("*.o")) + sorted(sodium_objects.glob("*.o"))
    run([ar, "rcs", prefix / "lib/libzmq.a", *objects], log_to)
    for h in ("zmq.h", "zmq_utils.h"):
        shutil.copyfile(src / "include" / h, prefix / "include" / h)
    return prefix


def build_wheel(prefix: Path, work: Path) -> Path:
    """Build the pyzmq wheel from its sdist, linking the static libzmq in ``prefix``."""
    env = {
        **os.environ,
        "ZMQ_PREFIX": str(prefix),
        "ZMQ_DRAFT_API": "1",
        "PYZMQ_LIBZMQ_RPATH": "0",  # nothing to find at run time: libzmq is static
        "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs()),
    }
    out = work / "wheel"
    # --no-cache-dir: never reuse a (non-draft) pyzmq wheel from pip's wheel cache.
    cmd = pip("wheel", "--no-deps", "--no-binary", "pyzmq", "--no-cache-dir", "-w", out)
    cmd += ["-C", "cmake.build-type=Release"]
    # The static libzmq needs the C++ runtime; the extension itself is C.
    cmd += ["-C", "cmake.define.CMAKE_C_STANDARD_LIBRARIES=-lstdc++ -lpthread"]
    run([*cmd, f"pyzmq=={PYZMQ_VERSION}"], work / "pyzmq.log", env)
    return only(out.glob("pyzmq-*.whl"), "built wheel")


def cached_wheel(dest: Path) -> Path | None:
    """The finished wheel in ``dest``, if any (it is moved in after the libzmq prefix)."""
    wheels = sorted(dest.glob("pyzmq-*.whl"))
    return wheels[-1] if wheels and (dest / "libzmq").is_dir() else None


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` (waits for other builders)."""
    import fcntl  # POSIX only: imported here so that other platforms get the plain "unsupported" message

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for lock {path}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def build_into(dest: Path) -> Path:
    """Run every step in a temporary folder inside ``dest``; move the wheel and libzmq prefix in."""
    # Build inside the cache dir so the final renames are atomic (same filesystem).
    with tempfile.TemporaryDirectory(prefix=".build-", dir=dest) as tmp:
        work = Path(tmp)
        log(f"building in {work} ({jobs()} jobs)")
        log(f"step 1/5: pip download pyzmq {LIBZMQ_SDIST} sdist (libzmq {LIBZMQ_VERSION} sources)")
        src = fetch_libzmq_source(work)
        log(f"step 2/5: {len(PATCHES)} source patch(es)")
        apply_patches(src)
        log(f"step 3/5: pip download PyNaCl {SODIUM_SDIST} sdist, build static libsodium {SODIUM_VERSION} from it")
        sodium = build_sodium(fetch_sodium_source(work), work)
        log(f"step 4/5: compiling static libzmq {LIBZMQ_VERSION} (drafts on, -O3, CURVE on libsodium)")
        prefix = build_libzmq(src, work, sodium)
        log(f"step 5/5: building pyzmq {PYZMQ_VERSION} wheel against it")
        built = build_wheel(prefix, work)
        shutil.rmtree(dest / "libzmq", ignore_errors=True)
        os.replace(prefix, dest / "libzmq")  # kept for C programs that link libzmq (tests/interop)
        wheel = dest / built.name
        os.replace(built, wheel)
    return wheel


def get_wheel() -> Path:
    """Return the cached draft wheel, building it (under a lock) if absent."""
    dest = cache_dir()
    if wheel := cached_wheel(dest):
        log(f"cached wheel {wheel}")
        return wheel
    if problem := platform_problem():
        raise Unsupported(problem)
    with locked(dest.with_name(dest.name + ".lock")):
        if wheel := cached_wheel(dest):  # built by a concurrent run
            log(f"cached wheel {wheel}")
            return wheel
        dest.mkdir(parents=True, exist_ok=True)
        for stale in dest.glob(".build-*"):  # left by a killed build; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        wheel = build_into(dest)
        log(f"wheel ready: {wheel}")
        return wheel


def libzmq_prefix() -> Path:
    """The prefix of the static draft libzmq the wheel was built with (building it if absent), with a
    ``lib/pkgconfig/libzmq.pc`` that points at it (written when missing or stale), so that ``pkg-config
    libzmq`` and CMake's ``pkg_check_modules`` find it."""
    wheel = cached_wheel(cache_dir()) or get_wheel()  # a cached one silently: its callers print paths and flags
    prefix = wheel.parent / "libzmq"
    header = (prefix / "include" / "zmq.h").read_text()
    parts = [re.search(rf"#define ZMQ_VERSION_{part} (\d+)", header) for part in ("MAJOR", "MINOR", "PATCH")]
    version = ".".join(found[1] if found else "0" for found in parts)
    text = (
        f"prefix={prefix}\nincludedir=${{prefix}}/include\nlibdir=${{prefix}}/lib\n\n"
        "Name: libzmq\nDescription: ZeroMQ with the draft API, static (generaldomo's build)\n"
        f"Version: {version}\nCflags: -I${{includedir}} -DZMQ_BUILD_DRAFT_API\n"
        "Libs: -L${libdir} -lzmq -pthread\nLibs.private: -lstdc++\n"
    )
    pc = prefix / "lib" / "pkgconfig" / "libzmq.pc"
    if not pc.is_file() or pc.read_text() != text:
        pc.parent.mkdir(exist_ok=True)
        fresh = pc.with_name(f".libzmq.pc.{os.getpid()}")
        fresh.write_text(text)
        os.replace(fresh, pc)  # concurrent writers write the same text
    return prefix


def probe() -> Installed:
    """What this interpreter's zmq is, asked in a fresh process (the running one may have loaded another)."""
    cmd = [sys.executable, "-c", PROBE_CODE]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    fields = proc.stdout.split()
    if proc.returncode or len(fields) != 4:
        return Installed("", "", False)
    has, pyzmq, libzmq, patched = fields
    return Installed(pyzmq, libzmq, has == "True", patched == "True")


def describe(installed: Installed) -> str:
    """``pyzmq X with libzmq Y, draft API`` or ``... no draft API``, or that there is none."""
    if not installed.pyzmq:
        return "no importable pyzmq"
    drafts = "draft API" if installed.draft else "no draft API"
    patched = "generaldomo's libzmq patches" if installed.patched else "without generaldomo's libzmq patches"
    return f"pyzmq {installed.pyzmq} with libzmq {installed.libzmq}, {drafts}, {patched}"


def environment() -> str:
    """The environment this interpreter installs into, and whether it is a virtual one."""
    kind = "a virtual environment" if sys.prefix != sys.base_prefix else "NOT a virtual environment"
    return f"{sys.prefix} ({kind}; python {sys.executable}, {platform.python_version()})"


def plan(installed: Installed) -> list[str]:
    """The lines saying what :func:`ensure` will do, given what is installed now."""
    lines = [f"environment:  {environment()}", f"now:          {describe(installed)}"]
    if installed.current:
        return [*lines, "nothing to do: draft sockets are available, with the libzmq patches"]
    wheel = cached_wheel(cache_dir())
    patches = ", ".join(p.name for p in PATCHES) or "none"
    lines += [
        f"will install: pyzmq {PYZMQ_VERSION} with libzmq {LIBZMQ_VERSION} linked in statically (draft API, "
        f"CURVE on libsodium {SODIUM_VERSION}, linked in too)",
        f"libzmq:       {LIBZMQ_VERSION}, not the 4.3.5 of PyPI's wheels: no PyPI distribution carries 4.3.5's "
        "sources; measured not slower (see `python -m pydoc generaldomo.draft`)",
    ]
    if not installed.pyzmq:
        lines.append("replaces:     nothing (no pyzmq in that environment)")
    else:
        lines.append(
            f"replaces:     pyzmq {installed.pyzmq} (libzmq {installed.libzmq}) in that environment; undo with "
            f"`{sys.executable} -m pip install --force-reinstall --no-deps pyzmq=={installed.pyzmq}`"
        )
    if wheel:
        lines.append(f"wheel:        cached, {wheel}")
    else:
        lines += [
            f"build:        from PyPI sources (pyzmq {LIBZMQ_SDIST} sdist for libzmq, PyNaCl {SODIUM_SDIST} sdist "
            f"for libsodium, pyzmq {PYZMQ_VERSION} sdist), libzmq patches: {patches}; about two minutes on 2 cores",
            f"cache:        {cache_dir()}",
        ]
        if problem := platform_problem():
            lines.append(f"cannot build: {problem}")
    if sys.prefix == sys.base_prefix:
        lines.append("warning:      every program run by this interpreter gets the new pyzmq")
    return lines


def install(wheel: Path) -> None:
    """Install ``wheel`` over this interpreter's pyzmq and check CLIENT/SERVER work in a fresh process."""
    log(f"installing {wheel.name} into {sys.prefix}")
    cmd = pip("install", "--force-reinstall", "--no-deps", wheel)
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode:
        raise BuildError(f"pip install failed:\n{proc.stdout}{proc.stderr}")
    cmd = [sys.executable, "-c", VERIFY_CODE]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)
    if proc.returncode:
        msg = "the installed pyzmq failed verification"
        raise BuildError(f"{msg}:\n{proc.stdout}{proc.stderr}")
    log(f"verified: {proc.stdout.strip()}")


def ensure(say: Callable[[str], None] = log) -> None:
    """Make sure this interpreter has a working draft-enabled pyzmq, saying first what that takes."""
    installed = probe()
    for line in plan(installed):
        say(line)
    if not installed.current:
        install(get_wheel())


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; ``main(["ensure"])`` installs draft support, returning the exit code."""
    parser = argparse.ArgumentParser(prog="python -m generaldomo.draft", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["plan", "ensure", "build", "libzmq-prefix"])
    args = parser.parse_args(argv)
    try:
        if args.command == "plan":
            print("\n".join(plan(probe())))
        elif args.command == "ensure":
            ensure()
        elif args.command == "build":
            print(get_wheel())
        else:
            print(libzmq_prefix())
    except (BuildError, subprocess.SubprocessError, OSError) as exc:
        print(f"generaldomo.draft: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
