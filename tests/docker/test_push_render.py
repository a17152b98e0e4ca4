"""The documented install path pulls what `make push` pushed: `sandbox images push` (the command `make push` runs) to
Debian's docker-registry on 127.0.0.1, then the chart rendered by the real helm with its registry value pointing
there and the kustomize base rendered by the real kubectl, and every image reference they name is looked up in the
registry (HTTP API v2: HEAD of the manifest). Before this, the chart's default tag (its appVersion) was never pushed
and every pod of a fresh install sat in ImagePullBackOff.

Pushed: the terminal and control-plane images (the control plane's is built here when stale, ~40 s); desktop and
browser are pushed the same way by test_push.py (35-60 s each), so here their references must have the very form the
terminal's has. The bundled Redis is Docker Hub's ``redis`` image, not the platform's: it is checked to be exactly
that, the one reference a registry mirror must add (or use an external Redis).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
import yaml

from sandbox import __version__
from tests.conftest import require_image
from tests.docker.test_push import MANIFEST_TYPES, Registry, registry, registry_tags, sandbox_cli
from tests.k8s import harness

pytestmark = pytest.mark.docker

__all__ = ["registry", "registry_tags"]  # fixtures, imported for this module

PUSHED = ("terminal", "controlplane")
REDIS = "docker.io/library/redis:7.4"


@pytest.fixture(scope="module")
def tools() -> None:
    try:
        harness.fetch_tools()
    except harness.ToolError as e:
        pytest.fail(str(e), pytrace=False)


def exists(registry: Registry, ref: str) -> bool:
    """HEAD /v2/<repository>/manifests/<tag> on the registry ``ref`` names."""
    assert ref.startswith(f"{registry.address}/"), f"{ref} does not name the registry {registry.address}"
    repository, tag = ref.removeprefix(f"{registry.address}/").rsplit(":", 1)
    url = f"http://{registry.address}/v2/{repository}/manifests/{tag}"
    return httpx.head(url, headers={"Accept": MANIFEST_TYPES}, timeout=10).status_code == 200


def pod_images(docs: list[dict[str, Any]]) -> set[str]:
    """The images of every container of every pod template (Deployment, StatefulSet, Job, bare Pod)."""
    refs = set()
    for d in docs:
        spec = d.get("spec") or {}
        pod = (spec.get("template") or {}).get("spec") if "template" in spec else spec if d["kind"] == "Pod" else None
        for container in [*(pod or {}).get("initContainers", []), *(pod or {}).get("containers", [])]:
            refs.add(container["image"])
    return refs


def sandbox_images(docs: list[dict[str, Any]]) -> dict[str, str]:
    """server.json's backend.images: kind -> the image the control plane starts sandboxes of."""
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and "server.json" in d.get("data", {})]
    images: dict[str, str] = json.loads(config["data"]["server.json"])["backend"]["images"]
    return images


@pytest.fixture(scope="module")
def pushed(registry: Registry, tools: None) -> dict[str, str]:
    client = docker.from_env(timeout=120)
    try:
        require_image(client, "terminal")
    finally:
        client.close()
    result = sandbox_cli("images", "push", registry.address, *PUSHED, timeout=840)
    assert result.returncode == 0, f"push failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr}"
    refs = dict(line.split() for line in result.stdout.splitlines() if " sha256:" in line and "|" not in line)
    for kind in PUSHED:
        assert f"{registry.address}/sandbox/{kind}:{__version__}" in refs, f"the chart's default tag of {kind}"
    return refs


@pytest.mark.timeout(900)
def test_every_image_the_chart_names_is_in_the_registry_make_push_filled(
    registry: Registry, registry_tags: None, pushed: dict[str, str]
) -> None:
    sets = (f"global.imageRegistry={registry.address}",)
    docs = list(harness.render_chart(sets=sets))
    images = pod_images(docs)
    sandboxes = sandbox_images(docs)
    assert images - {REDIS} == {f"{registry.address}/sandbox/controlplane:{__version__}"}, images  # Deployment, Job
    assert REDIS in images
    for ref in images - {REDIS}:
        assert exists(registry, ref), f"the chart names {ref}; `sandbox images push` did not push it"
    assert exists(registry, sandboxes["terminal"]), f"server.json names {sandboxes['terminal']}, never pushed"
    for kind, ref in sandboxes.items():
        assert ref == f"{registry.address}/sandbox/{kind}:{__version__}", (kind, ref)
    # the registry of each part set on its own (controlPlane.image.registry, sandboxes.images.registry) as well
    sets = (f"controlPlane.image.registry={registry.address}", f"sandboxes.images.registry={registry.address}")
    docs = list(harness.render_chart(sets=sets))
    assert pod_images(docs) - {REDIS} == images - {REDIS} and sandbox_images(docs) == sandboxes
    # a tag nobody pushed is seen missing: the check can fail
    assert not exists(registry, f"{registry.address}/sandbox/controlplane:0.0.0-never-pushed")


@pytest.mark.timeout(900)
def test_every_image_the_kustomize_base_names_is_in_the_registry(
    registry: Registry, registry_tags: None, pushed: dict[str, str], tmp_path: Path
) -> None:
    """The base names images without a registry (`images:` of an overlay adds it, as overlays/example does); the
    control-plane image and server.json's sandbox images carry the default tag `make push` pushes."""
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(harness.KUSTOMIZE_TREES["base"], tmp_path)],  # kustomize takes no absolute path
        "images": [{"name": "sandbox/controlplane", "newName": f"{registry.address}/sandbox/controlplane"}],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    docs = harness.load_all(harness.run([harness.KUBECTL, "kustomize", "--load-restrictor=LoadRestrictionsNone",
                                         tmp_path]).stdout)  # fmt: skip
    images = pod_images(docs)
    assert images - {REDIS} == {f"{registry.address}/sandbox/controlplane:{__version__}"}, images
    for ref in images - {REDIS}:
        assert exists(registry, ref), f"the kustomize base names {ref}; `sandbox images push` did not push it"
    for kind, ref in sandbox_images(docs).items():
        assert ref == f"sandbox/{kind}:{__version__}", (kind, ref)
    assert exists(registry, f"{registry.address}/{sandbox_images(docs)['terminal']}")
