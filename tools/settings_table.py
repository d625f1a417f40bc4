"""Write the settings table of the configurable commands into README.rst (between its two marker comments).

Run it after adding or changing a setting (a knob of generaldomo.sansio.knobs, or an option of the broker,
worker or client command): ``python tools/settings_table.py``; tests/cli/test_config.py checks that the README shows
the table as the code makes it.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's generaldomo, not an installed copy of it

from generaldomo.cli import settings_table  # noqa: E402

README = ROOT / "README.rst"
BEGIN = ".. the settings table begins (made by tools/settings_table.py)\n"
END = ".. the settings table ends\n"


def shown(text: str) -> str:
    """The table as the README has it (between the markers); ValueError without exactly one pair of them."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"{README}: expected one settings table between {BEGIN.strip()!r} and {END.strip()!r}")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def main() -> None:
    text = README.read_text()
    old = shown(text)
    README.write_text(text.replace(f"{BEGIN}\n{old}\n\n{END}", f"{BEGIN}\n{settings_table().strip()}\n\n{END}"))


if __name__ == "__main__":
    main()
