"""The C reference broker: the zguide's ``examples/C/mdbroker.c`` (MDP/0.1), built for the ``cpeers`` part.

Its sources are never part of this repository: they are taken from ``$GENERALDOMO_ZGUIDE`` (a zguide checkout),
else from an earlier download in the cache, else downloaded once from GitHub. It needs CZMQ (Debian:
``apt-get install libczmq-dev``, which brings Debian's libzmq; the broker is a process of its own, so that is
not a second libzmq in any process of ours) and builds against CZMQ 4 through ``bench/cref/czmq3_compat.h``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import urllib.request
from pathlib import Path

URL = "https://raw.githubusercontent.com/booksbyus/zguide/master/examples/C/"
FILES = ("mdbroker.c", "mdp.h")
COMPAT = Path(__file__).resolve().parent / "cref" / "czmq3_compat.h"


def sources(cache: Path, download: bool) -> tuple[Path | None, str]:
    """The directory holding mdbroker.c and mdp.h (downloaded into ``cache`` if ``download``), or None and
    why not."""
    given = os.environ.get("GENERALDOMO_ZGUIDE")
    if given:
        folder = Path(given) / "examples" / "C"
        if all((folder / name).is_file() for name in FILES):
            return folder, ""
        return None, f"$GENERALDOMO_ZGUIDE={given} has no examples/C/{' or '.join(FILES)}"
    folder = cache / "zguide"
    if all((folder / name).is_file() for name in FILES):
        return folder, ""
    if not download:
        return None, "the zguide sources are not in the cache and this run downloads nothing"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        for name in FILES:
            with urllib.request.urlopen(URL + name, timeout=15) as response:
                (folder / f"{name}.part").write_bytes(response.read())
    except OSError as error:
        return None, f"cannot download the zguide sources from {URL} ({error}); set $GENERALDOMO_ZGUIDE"
    for name in FILES:
        (folder / f"{name}.part").replace(folder / name)
    return folder, ""


def build(cache: Path, download: bool = True) -> tuple[Path | None, str]:
    """Build ``mdbroker`` into ``cache`` if out of date; return its path, or None and why not."""
    if not Path("/usr/include/czmq.h").is_file() and not shutil.which("pkg-config"):
        return None, "CZMQ headers not found (Debian: apt-get install libczmq-dev)"
    folder, why = sources(cache, download)
    if folder is None:
        return None, why
    target = cache / "mdbroker"
    inputs = [folder / "mdbroker.c", folder / "mdp.h", COMPAT]
    if target.exists() and all(target.stat().st_mtime >= p.stat().st_mtime for p in inputs):
        return target, ""
    cc = shlex.split(os.environ.get("CC") or "cc")
    cmd = [*cc, "-O2", "-include", str(COMPAT), f"-I{folder}", str(folder / "mdbroker.c"), "-lczmq", "-lzmq"]
    try:
        done = subprocess.run([*cmd, "-o", str(target)], capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"cannot run the C compiler: {error}"
    if done.returncode:
        return None, f"mdbroker.c does not build (is libczmq-dev installed?): {done.stderr.strip()[:300]}"
    return target, ""
