"""The soak runs only when asked (``make soak`` sets ``SANDBOX_SOAK=1``): it takes minutes, so ``make test`` leaves it
out (deselected, not skipped)."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "soak: minutes of load through a real server (make soak)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("SANDBOX_SOAK") == "1":
        return
    soak = [item for item in items if item.get_closest_marker("soak") is not None]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if item.get_closest_marker("soak") is None]
