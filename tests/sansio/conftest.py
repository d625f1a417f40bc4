"""The IO-free layer's tests run on both of its paths: compiled (env py, when the build is there: see
generaldomo.compiled) and pure Python (env pure, ``GENERALDOMO_PURE_PYTHON=1``): each of them is marked ``pure``."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.pure)
