"""Install a pyzmq built against libzmq with the DRAFT API (zmq.CLIENT/SERVER).

PyPI wheels and Debian's libzmq lack draft support, so we build our own wheel,
using only PyPI and the local C/C++ compiler:

1. ``pip download`` the pyzmq 25.1.2 sdist, which carries the libzmq 4.3.4
   sources under ``bundled/zeromq``;
2. patch them (:data:`LIBZMQ_PATCHES`: a ROUTER socket's generated peer ids
   skip ids in use, so that a peer choosing one cannot make libzmq abort; and
   ``zmq_generaldomo_drain``, which discards the rest of a message in C) and
   compile them (``-O3``, drafts on, CURVE via built-in tweetnacl, no
   libsodium) into a static, position-independent ``libzmq.a``;
3. ``pip wheel`` pyzmq 27 from its sdist against that prefix, so libzmq is
   linked statically into the extension: the wheel is self-contained.

The wheel is cached in ``$GENERALDOMO_CACHE`` (default
``~/.cache/generaldomo``) under ``pyzmq-draft/<python>-<platform>-<recipe>/``.

Usage::

    python tools/draft_pyzmq.py ensure   # install into this interpreter if needed
    python tools/draft_pyzmq.py build    # build/cache the wheel, print its path
    python tools/draft_pyzmq.py libzmq-prefix  # the static libzmq it was built with (include/, lib/)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fcntl
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from subprocess import STDOUT

PYZMQ_VERSION = "27.3.0"
LIBZMQ_SDIST = "25.1.2"  # pyzmq sdist that bundles the libzmq 4.3.4 sources
RECIPE = f"pyzmq{PYZMQ_VERSION}-zmq4.3.4-static-r4-ridguard-drain"

# Configuration as libzmq 4.3.4's own CMake detects it on Linux/glibc with
# ENABLE_DRAFTS=ON, WITH_LIBSODIUM=OFF, ENABLE_WS=OFF (TIPC left out too).
PLATFORM_HPP = """\
#ifndef __ZMQ_PLATFORM_HPP_INCLUDED__
#define __ZMQ_PLATFORM_HPP_INCLUDED__
#define ZMQ_HAVE_LINUX
#define ZMQ_BUILD_DRAFT_API
#define ZMQ_USE_CV_IMPL_STL11
#define ZMQ_IOTHREAD_POLLER_USE_EPOLL
#define ZMQ_IOTHREAD_POLLER_USE_EPOLL_CLOEXEC
#define ZMQ_POLL_BASED_ON_POLL
#define ZMQ_CACHELINE_SIZE 64
#define HAVE_FORK
#define HAVE_CLOCK_GETTIME
#define HAVE_MKDTEMP
#define HAVE_ACCEPT4
#define HAVE_STRNLEN
#define HAVE_IF_NAMETOINDEX
#define ZMQ_HAVE_UIO
#define ZMQ_HAVE_NOEXCEPT
#define ZMQ_HAVE_EVENTFD
#define ZMQ_HAVE_EVENTFD_CLOEXEC
#define ZMQ_HAVE_IFADDRS
#define ZMQ_HAVE_SO_BINDTODEVICE
#define ZMQ_HAVE_SO_PEERCRED
#define ZMQ_HAVE_O_CLOEXEC
#define ZMQ_HAVE_SOCK_CLOEXEC
#define ZMQ_HAVE_SO_KEEPALIVE
#define ZMQ_HAVE_SO_PRIORITY
#define ZMQ_HAVE_TCP_KEEPCNT
#define ZMQ_HAVE_TCP_KEEPIDLE
#define ZMQ_HAVE_TCP_KEEPINTVL
#define ZMQ_HAVE_PTHREAD_SETNAME_2
#define ZMQ_HAVE_PTHREAD_SET_AFFINITY
#define ZMQ_HAVE_IPC
#define ZMQ_HAVE_CURVE
#define ZMQ_USE_TWEETNACL
#define ZMQ_USE_RADIX_TREE
#endif
"""
# Sources whose transports are disabled above (they would compile to nothing).
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
# "patched": the libzmq has LIBZMQ_PATCHES (its drain function is their marker), so that an environment with
# an older wheel of this recipe is upgraded.
PROBE_CODE = """\
import ctypes, zmq
try:
    from zmq.backend.cython import _zmq
    patched = hasattr(ctypes.CDLL(_zmq.__file__), "zmq_generaldomo_drain")
except (ImportError, OSError):
    patched = False
print(zmq.has('draft') and patched, zmq.__version__, zmq.zmq_version(), patched)
"""

_T0 = time.monotonic()
Env = Mapping[str, str]


class BuildError(RuntimeError):
    """A step of the build, install or verification failed."""


def log(msg: str) -> None:
    """Print a progress line with the elapsed time to stderr."""
    elapsed = time.monotonic() - _T0
    print(f"[draft_pyzmq {elapsed:5.1f}s] {msg}", file=sys.stderr, flush=True)


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


def run(cmd: Sequence[str | Path], log_to: Path, env: Env | None = None) -> None:
    """Run ``cmd``, appending its output to ``log_to``; BuildError on failure."""
    with log_to.open("ab") as out:
        argv = [str(c) for c in cmd]
        proc = subprocess.run(argv, check=False, stdout=out, stderr=STDOUT, env=env)
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
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tf.extractall(work, members=members, **kwargs)
    return work / top


# ---------------------------------------------------------------------------------------- libzmq patch
# Two small additions to libzmq, each text found exactly as often in libzmq 4.3.4 and 4.3.5.
# 1. The routing-id guard. libzmq's ROUTER gives a peer without an id of its own a generated one, 0x00 + a
#    4-byte counter (src/router.cpp, identify_peer), and asserts in routing_socket_base_t::add_out_pipe when
#    that id is already held by a peer that chose it: one DEALER choosing the next generated id aborts the
#    process. Each generated id now skips ids in use (three places: raw sockets, peers without an id, and the
#    id given to a pipe that ZMQ_ROUTER_HANDOVER displaces).
# 2. zmq_generaldomo_drain(socket): discard the rest of the message being received, in C, and return how many
#    frames it had. From Python each frame costs about a microsecond, so a message of millions of frames
#    stalled the broker for seconds (bench/README.md); generaldomo.io.links uses it when libzmq has it.
DRAIN_FUNCTION = """

//  generaldomo: discard the rest of the message being received; return the number of frames discarded.
extern "C" long zmq_generaldomo_drain (void *s_)
{
    int more = 0;
    size_t more_size = sizeof more;
    if (zmq_getsockopt (s_, ZMQ_RCVMORE, &more, &more_size) == -1)
        return -1;
    zmq_msg_t msg;
    zmq_msg_init (&msg);
    long count = 0;
    while (more && zmq_msg_recv (&msg, s_, ZMQ_DONTWAIT) >= 0) {
        ++count;
        more = zmq_msg_more (&msg);
    }
    zmq_msg_close (&msg);
    return count;
}
"""
LIBZMQ_PATCHES = (
    (
        "src/router.cpp",
        "put_uint32 (buf + 1, _next_integral_routing_id++);",
        "do /* generaldomo: skip ids in use */\n"
        "            put_uint32 (buf + 1, _next_integral_routing_id++);\n"
        "        while (has_out_pipe (blob_t (buf, sizeof buf)));",
        3,
    ),
    ("src/zmq.cpp", "return s->query_pipes_stats ();\n}\n", "return s->query_pipes_stats ();\n}\n" + DRAIN_FUNCTION, 1),
)


def patch_libzmq(src: Path) -> None:
    """Apply :data:`LIBZMQ_PATCHES` to the libzmq source tree ``src`` (4.3.4 or 4.3.5); BuildError if one does
    not fit."""
    for name, old, new, count in LIBZMQ_PATCHES:
        path = src / name
        text = path.read_text()
        found = text.count(old)
        if found != count:
            raise BuildError(f"libzmq patch: expected {count} x {old!r} in {path}, found {found}")
        path.write_text(text.replace(old, new))


# ------------------------------------------------------------------------------------------------------------


def build_libzmq(src: Path, work: Path) -> Path:
    """Compile libzmq into a static PIC ``libzmq.a``; return its install prefix."""
    objdir, prefix = work / "obj", work / "prefix"
    for d in (objdir, prefix / "lib", prefix / "include"):
        d.mkdir(parents=True)
    (objdir / "platform.hpp").write_text(PLATFORM_HPP)
    flags = [*CFLAGS, f"-I{objdir}", f"-I{src / 'include'}"]
    cxx = [os.environ.get("CXX", "c++"), "-std=gnu++11", *flags]
    cmds = [
        [*cxx, "-c", f, "-o", objdir / f"{f.stem}.o"]
        for f in sorted((src / "src").glob("*.cpp"))
        if not f.name.startswith(SKIP_PREFIXES)
    ]
    cc = [os.environ.get("CC", "cc"), "-std=gnu11", *flags]
    cmds.append([*cc, "-c", src / "src" / "tweetnacl.c", "-o", objdir / "nacl.o"])
    log_to = work / "libzmq.log"
    with concurrent.futures.ThreadPoolExecutor(jobs()) as pool:
        futures = [pool.submit(run, cmd, log_to) for cmd in cmds]
        try:
            for fut in concurrent.futures.as_completed(futures):
                fut.result()
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
    objects = sorted(objdir.glob("*.o"))
    run([os.environ.get("AR", "ar"), "rcs", prefix / "lib/libzmq.a", *objects], log_to)
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
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for lock {path}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def get_wheel() -> Path:
    """Return the cached draft wheel, building it (under a lock) if absent."""
    dest = cache_dir()
    if wheel := cached_wheel(dest):
        log(f"cached wheel {wheel}")
        return wheel
    if not sys.platform.startswith("linux"):
        raise BuildError("only Linux is supported by this recipe")
    with locked(dest.with_name(dest.name + ".lock")):
        if wheel := cached_wheel(dest):  # built by a concurrent run
            log(f"cached wheel {wheel}")
            return wheel
        dest.mkdir(parents=True, exist_ok=True)
        for stale in dest.glob(".build-*"):  # left by a killed build; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        # Build inside the cache dir so the final rename is atomic (same filesystem).
        with tempfile.TemporaryDirectory(prefix=".build-", dir=dest) as tmp:
            work = Path(tmp)
            log(f"building in {work} ({jobs()} jobs)")
            log(f"step 1/3: pip download pyzmq {LIBZMQ_SDIST} sdist (libzmq source)")
            src = fetch_libzmq_source(work)
            patch_libzmq(src)
            log("step 2/3: compiling static libzmq (drafts on, -O3)")
            prefix = build_libzmq(src, work)
            log(f"step 3/3: building pyzmq {PYZMQ_VERSION} wheel against it")
            built = build_wheel(prefix, work)
            shutil.rmtree(dest / "libzmq", ignore_errors=True)
            os.replace(prefix, dest / "libzmq")  # kept for C programs that link libzmq (tests/interop)
            wheel = dest / built.name
            os.replace(built, wheel)
        log(f"wheel ready: {wheel}")
        return wheel


def probe() -> tuple[bool, str]:
    """Whether this interpreter's zmq has drafts and this recipe's libzmq patches, with a description."""
    cmd = [sys.executable, "-c", PROBE_CODE]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    fields = proc.stdout.split()
    if proc.returncode or len(fields) != 4:
        return False, "zmq not importable"
    ok, pyzmq, libzmq, patched = fields
    return ok == "True", f"pyzmq {pyzmq}, libzmq {libzmq}, draft and patched={ok} (patched={patched})"


def ensure() -> None:
    """Make sure this interpreter has a working draft-enabled pyzmq."""
    ok, desc = probe()
    if ok:
        print(f"draft pyzmq already installed ({desc})")
        return
    log(f"current: {desc}; need draft-enabled pyzmq")
    wheel = get_wheel()
    log(f"installing {wheel.name} into {sys.executable}")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["ensure", "build", "libzmq-prefix"])
    args = parser.parse_args(argv)
    try:
        if args.command == "ensure":
            ensure()
        elif args.command == "build":
            print(get_wheel())
        else:
            print(get_wheel().parent / "libzmq")
    except (BuildError, subprocess.SubprocessError, OSError) as exc:
        print(f"draft_pyzmq: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
