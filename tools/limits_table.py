"""Write the field-limits table of generaldomo.sansio.wire.limits into docs/protocol.rst (where the old one was).

Run it after changing the table: ``python tools/limits_table.py``; tests/sansio/wire/test_field_limits.py checks
that the document shows the table as the code has it.
"""

from __future__ import annotations

import re
from pathlib import Path

from generaldomo.sansio.wire.limits import rst_table

DOCUMENT = Path(__file__).resolve().parents[1] / "docs" / "protocol.rst"
# the simple table whose header row is "field  bounds  beyond them": rule, header, rule, rows, rule
TABLE = re.compile(r"^(=+  =+  =+)\nfield +bounds +beyond them\n\1\n(?:.*\n)*?\1$", re.MULTILINE)


def main() -> None:
    text = DOCUMENT.read_text()
    updated, found = TABLE.subn(rst_table(), text)
    if found != 1:
        raise SystemExit(f"{DOCUMENT}: expected one field-limits table, found {found}")
    DOCUMENT.write_text(updated)


if __name__ == "__main__":
    main()
