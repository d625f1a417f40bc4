"""Check the release artefacts as a new user meets them: ``python tools/check_wheel.py WORK_DIR``.

Builds the sdist and, from it, the wheel (``python -m build``); checks what the wheel holds; installs the wheel
alone into a fresh virtual environment; then, from outside the source tree, runs ``generaldomo doctor`` (the C
accelerator and the compiled sans-IO core in use, and not with ``GENERALDOMO_PURE_PYTHON=1``; a wheel without
the compiled core fails the check where ``GENERALDOMO_EXPECT_COMPILED=1`` is set, as in tox's env wheel), the
server transport without draft sockets (whose error must name this environment's install command), that
command's plan, ``generaldomo doctor --install-draft``, ``generaldomo doctor`` again and ``generaldomo demo``
on each transport; then builds the guide's C++ example with the headers installed with the wheel, by the
guide's pkg-config commands and by its CMake project, and runs both against a broker and a worker of the
environment. Exits non-zero on the first failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the guide's code blocks, by name (tests/doc_blocks.py)

from doc_blocks import named  # noqa: E402

IN_WHEEL = (
    "generaldomo/py.typed",
    "generaldomo/draft.py",
    "generaldomo/cli/__init__.py",
    "generaldomo/dashboard/static/index.html",
    "generaldomo/dashboard/static/uPlot.iife.min.js",
    "generaldomo/dashboard/static/uPlot.LICENSE",
    "generaldomo/cpp/include/generaldomo/generaldomo.hpp",
    "generaldomo/cpp/lib/pkgconfig/generaldomo.pc",
    "generaldomo/cpp/lib/cmake/generaldomo/generaldomoConfig.cmake",
    *(f"generaldomo/patches/{path.name}" for path in sorted((ROOT / "generaldomo" / "patches").glob("*.patch"))),
)
DEMO_TRANSPORTS = ("router", "server")


class CheckFailed(RuntimeError):
    """A step did not do what a user would expect."""


def step(cmd: list[str], cwd: Path, expect: int = 0, timeout: float = 1800, env: dict[str, str] | None = None) -> str:
    """Run ``cmd`` in ``cwd`` (``env``: added to this environment), echo its output, and return it; CheckFailed
    unless it exits with ``expect``."""
    print(f"$ {' '.join(cmd)}", flush=True)
    proc = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, env={**os.environ, **(env or {})}
    )
    output = proc.stdout + proc.stderr
    print(output, end="", flush=True)
    if proc.returncode != expect:
        raise CheckFailed(f"exit {proc.returncode}, expected {expect}: {' '.join(cmd)}")
    return output


def build(work: Path) -> Path:
    """The wheel ``python -m build`` makes (via the sdist), after checking its contents."""
    dist = work / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    step([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], work, timeout=600)
    (wheel,) = dist.glob("generaldomo-*.whl")
    (sdist,) = dist.glob("generaldomo-*.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in IN_WHEEL if name not in names]
    if missing or not any(name.endswith(".dist-info/licenses/LICENSE") for name in names):
        raise CheckFailed(f"{wheel.name} lacks {missing or 'its LICENSE'}")
    print(f"built {sdist.name} and {wheel.name}", flush=True)
    return wheel


def fresh_venv(work: Path, wheel: Path) -> Path:
    """A new virtual environment holding only ``wheel`` and its dependencies; its bin folder."""
    env = work / "venv"
    shutil.rmtree(env, ignore_errors=True)
    venv.EnvBuilder(with_pip=True).create(env)
    bin_dir = env / "bin"
    step([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(wheel)], work, timeout=600)
    return bin_dir


def shell(script: str, cwd: Path, bin_dir: Path) -> str:
    """Run the guide's shell lines (but those that run the program) with the environment's ``python``."""
    lines = "\n".join(line for line in script.splitlines() if not line.startswith("./"))
    path = f"{bin_dir}:{os.environ['PATH']}"
    return step(["env", f"PATH={path}", "bash", "-euc", lines], cwd, timeout=900)


def cpp_example(work: Path, bin_dir: Path) -> None:
    """The guide's C++ example, built with pkg-config and with CMake from the installed headers, run against
    a broker and an echo worker of the environment: four threads, four answers."""
    folder = work / "cpp-example"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    (folder / "example.cpp").write_text((ROOT / "docs" / "examples" / "client.cpp").read_text())
    (folder / "CMakeLists.txt").write_text(named("cpp-cmakelists"))
    commands = named("cpp-build-pkg-config")
    if "pkg-config --cflags --libs generaldomo" not in commands:
        raise CheckFailed("the guide's compile line does not use pkg-config")
    shell(commands, folder, bin_dir)
    shell(named("cpp-build-cmake"), folder, bin_dir)
    programs = [folder / "example", folder / "build" / "example"]
    gd = str(bin_dir / "generaldomo")
    broker = subprocess.Popen([gd, "broker", "--server", "tcp://127.0.0.1:*"], stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        assert broker.stdout is not None
        line = broker.stdout.readline()
        if not line.startswith("generaldomo broker: server tcp://"):
            raise CheckFailed(f"the broker did not say where it listens: {line!r}")
        endpoint = line.split()[-1]
        worker = subprocess.Popen([gd, "worker", "--transport", "server", "--connect", endpoint, "--tag", "w"])
        step([gd, "client", "--transport", "server", "--connect", endpoint, "--timeout", "120", "echo", "up"], folder)
        for program in programs:
            answers = sorted(step([str(program), endpoint], folder, timeout=120).splitlines())
            if answers != [f"w:hello {t}" for t in range(4)]:
                raise CheckFailed(f"{program} answered {answers}")
    finally:
        for process in filter(None, (worker, broker)):
            process.terminate()
            process.wait(30)


def check(work: Path) -> None:
    """Every step of the module docstring."""
    work.mkdir(parents=True, exist_ok=True)
    wheel = build(work)
    bin_dir = fresh_venv(work, wheel)
    gd = str(bin_dir / "generaldomo")
    if "draft sockets (CLIENT/SERVER): no" in step([gd, "doctor"], work):  # a warning: the router transport works
        refused = step([gd, "demo", "--transport", "server", "--requests", "10"], work, expect=2)
        found = re.search(r"install one with: (\S+) -m generaldomo\.draft ensure", refused)
        if not found or Path(found[1]) != bin_dir / "python":
            raise CheckFailed("the draft error does not name this environment's install command")
        step([found[1], "-m", "generaldomo.draft", "plan"], work)
        step([gd, "doctor", "--install-draft"], work)  # what the doctor's own hint offers besides the module
    doctor = step([gd, "doctor"], work)
    if "draft sockets (CLIENT/SERVER): yes" not in doctor:
        raise CheckFailed("doctor does not report draft sockets after the install")
    if "broker links: C accelerator" not in doctor:  # the wheel was built with a C compiler at hand
        raise CheckFailed("the wheel's broker links do not use the C accelerator")
    compiled = any(name == "generaldomo/_compiled/manifest.json" for name in zipfile.ZipFile(wheel).namelist())
    said = (
        "sans-IO core: compiled (mypyc: " if compiled else "sans-IO core: pure Python (the compiled core is not built)"
    )
    if said not in doctor:  # the compiled core (mypyc is a build requirement) is used exactly when the wheel has it
        raise CheckFailed(f"doctor does not say {said!r}")
    print(f"the wheel {'holds' if compiled else 'does not hold'} the compiled sans-IO core", flush=True)
    if not compiled and os.environ.get("GENERALDOMO_EXPECT_COMPILED", "") not in ("", "0"):  # (tox's env wheel)
        raise CheckFailed("the wheel does not hold the compiled sans-IO core (GENERALDOMO_EXPECT_COMPILED is set)")
    pure = step([gd, "doctor"], work, env={"GENERALDOMO_PURE_PYTHON": "1"})
    if "sans-IO core: pure Python (GENERALDOMO_PURE_PYTHON is set)" not in pure:
        raise CheckFailed("GENERALDOMO_PURE_PYTHON=1 does not select the wheel's pure-Python core")
    for transport in DEMO_TRANSPORTS:
        shown = step([gd, "demo", "--transport", transport, "--requests", "200"], work, timeout=120)
        if "all answered correctly: True" not in shown:
            raise CheckFailed(f"the {transport} demo did not answer every request")
    cpp_example(work, bin_dir)


def main(argv: list[str]) -> int:
    """Command-line entry point."""
    if len(argv) != 1:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    try:
        check(Path(argv[0]).resolve())
    except (CheckFailed, subprocess.SubprocessError, OSError, ValueError) as error:
        print(f"check_wheel: FAILED: {error}", file=sys.stderr)
        return 1
    print(
        "check_wheel: the wheel installs alone, installs draft support, runs the demo on both transports, and its "
        "C++ headers build the guide's example with pkg-config and CMake"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
