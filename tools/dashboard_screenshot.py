"""Take the guide's screenshot of the dashboard: ``python tools/dashboard_screenshot.py [PNG]``.

The picture is the one the browser test of the charts takes (``tests/dashboard/test_dashboard_browser.py``: idle,
sparse and busy services, one of them under a concurrency limit, in Debian's chromium through Playwright), after
it has checked that no chart overflows its card and no time labels overlap; this runs that test with
``GENERALDOMO_SCREENSHOT`` naming where to write it (default ``docs/dashboard.png``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/dashboard/test_dashboard_browser.py::test_the_charts_fit_their_cards_and_read_well_with_idle_sparse_and_busy_services"  # noqa: E501


def main(out: Path) -> int:
    environment = {**os.environ, "GENERALDOMO_SCREENSHOT": str(out.resolve())}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", TEST], cwd=ROOT, env=environment)
    if done.returncode == 0:
        print(f"wrote {out}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "dashboard.png"))
