"""The two broker transports as test parameters: the server transport carries the ``needs_draft`` marker."""

from __future__ import annotations

import pytest

# conftest.py skips the tests marked needs_draft when pyzmq lacks the draft sockets (and GENERALDOMO_ALLOW_NO_DRAFT
# is set); parametrise a test with TRANSPORTS (or take the ``transport`` fixture) and its server case is marked.
TRANSPORTS = ("router", pytest.param("server", marks=pytest.mark.needs_draft))
