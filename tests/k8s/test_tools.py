"""The helm and kubectl the other checks run are real binaries, fetched by scripts/k8s_tools.sh."""

from __future__ import annotations

import re

from tests.k8s import harness


def test_tools_run_and_report_versions(k8s_tools: str) -> None:
    helm = harness.run([harness.HELM, "version", "--short"]).stdout.strip()
    kubectl = harness.run([harness.KUBECTL, "version", "--client"]).stdout
    assert re.match(r"^v[34]\.\d+\.\d+", helm), helm
    assert re.search(r"Client Version: v1\.\d+\.\d+", kubectl), kubectl
    assert re.search(r"Kustomize Version: v5\.", kubectl), kubectl
    # what the script printed is what the binaries say
    assert helm in k8s_tools and "Client Version" in k8s_tools


def test_fetch_script_is_idempotent() -> None:
    """With both binaries present and running, the script downloads nothing and only prints the versions."""
    proc = harness.run(["bash", harness.ROOT / "scripts" / "k8s_tools.sh", harness.TOOLS_DIR])
    assert "downloading" not in proc.stderr
    assert proc.stdout.startswith("helm:")
