"""Run the packaged draft installer from a source tree: ``python tools/draft_pyzmq.py ensure|build|...``.

The installer is :mod:`generaldomo.draft` (``python -m generaldomo.draft`` in an installation); this wrapper loads
that file directly, so it needs neither zmq nor an installed generaldomo.
"""

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "generaldomo" / "draft.py"
_spec = importlib.util.spec_from_file_location("generaldomo_draft", _PATH)
assert _spec is not None and _spec.loader is not None
_draft = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_draft)

if __name__ == "__main__":
    sys.exit(_draft.main())
