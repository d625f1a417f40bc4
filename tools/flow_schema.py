"""Write the schema of the flow report, made from the flow limits' declarations, into docs/status.schema.json.

Run it after declaring or changing a flow limit (generaldomo.sansio.broker.flow.flow.LIMITS):
``python tools/flow_schema.py``; tests/sansio/test_flow_limits.py checks that the file holds the schema the code
makes. The rest of the file is left as it is; the flow object is written in the file's style (an object with
properties over several lines, everything else on one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from generaldomo.sansio.broker.flow.declaration import schema
from generaldomo.sansio.broker.flow.flow import LIMITS

DOCUMENT = Path(__file__).resolve().parents[1] / "docs" / "status.schema.json"
START = '        "flow": {'  # the flow object, a property of $defs.service


def render(value: Any, indent: int, expand: bool = False) -> str:
    """``value`` as JSON text in the file's style, its closing brace at ``indent``."""
    if not isinstance(value, dict) or not (
        expand or "properties" in value or isinstance(value.get("additionalProperties"), dict)
    ):
        return json.dumps(value, ensure_ascii=False)
    pad = " " * indent
    items = [f"{pad}  {json.dumps(k)}: {render(v, indent + 2, k == 'properties')}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + f"\n{pad}}}"


def written(text: str) -> str:
    """``text`` (the file's) with its flow object made from the declarations."""
    start = text.index("{", text.index(START))
    depth = 0
    for end in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)  # no brace in the file's descriptions
        if depth == 0:
            break
    return text[:start] + render(schema(LIMITS), len(START) - len(START.lstrip())) + text[end + 1 :]


def main() -> None:
    updated = written(DOCUMENT.read_text())
    json.loads(updated)
    DOCUMENT.write_text(updated)


if __name__ == "__main__":
    main()
