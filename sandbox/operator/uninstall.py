"""``python -m sandbox.operator.uninstall``: what the chart's pre-delete hook runs on ``helm uninstall``.

Mirrored ``Sandbox`` objects carry the finalizer ``sandbox.platform.io/end-sandbox``, which only the leading control
plane removes (after ending the sandbox). ``helm uninstall`` deletes that control plane with everything else, so the
objects, and a deletion of the sandbox namespace, would hang Terminating. Before the release's objects go, this:

1. stops the control plane: scales its Deployment to 0 and waits until its pods are gone, so that no leader mirrors
   a sandbox again behind our back (a Deployment that is not there is already stopped);
2. removes the finalizer from every Sandbox object of this owner (label ``sandbox.owner``) and deletes the object;
3. deletes this owner's sandbox pods and each one's agent Secret.

Every step is idempotent: a Job retried after a failure picks up where the last one stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
from dataclasses import dataclass

from sandbox.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, MANAGED_BY
from sandbox.backends.kubernetes import manifests
from sandbox.backends.kubernetes.api import KubeApi, core_path
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.errors import NotFound, SandboxError
from sandbox.operator import resources as res

LOGGER = logging.getLogger("sandbox.operator.uninstall")


@dataclass
class Released:
    """What one run did."""

    control_plane_stopped: bool = False
    finalizers_removed: int = 0
    sandboxes_deleted: int = 0
    pods_deleted: int = 0
    secrets_deleted: int = 0


def owner_selector(owner: str) -> str:
    return f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_OWNER}={owner}"


async def stop_control_plane(
    api: KubeApi, namespace: str, deployment: str, selector: str, *, timeout_s: float, poll_s: float = 1.0
) -> bool:
    """Scale the Deployment to 0 and wait until no pod matches ``selector``; False when there is no Deployment."""
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}/scale"
    try:
        await api.merge_patch(path, {"spec": {"replicas": 0}}, what=f"scale Deployment {deployment} to 0")
    except NotFound:
        LOGGER.info("no Deployment %s in %s: the control plane is not running", deployment, namespace)
        return False
    deadline = time.monotonic() + timeout_s
    while True:
        listing = await api.list(core_path(namespace, "pods"), what="list control-plane pods", selector=selector)
        left = [p["metadata"]["name"] for p in listing.get("items") or []]
        if not left:
            return True
        if time.monotonic() >= deadline:
            raise TimeoutError(f"control-plane pods still running after {timeout_s:.0f} s: {', '.join(left)}")
        await asyncio.sleep(poll_s)


async def release_sandboxes(api: KubeApi, namespace: str, owner: str, done: Released) -> None:
    """Drop our finalizer from this owner's Sandbox objects, delete them, then their pods and secrets."""
    selector = owner_selector(owner)
    listing = await api.list(res.path(namespace, res.SANDBOXES), what="list Sandbox objects", selector=selector)
    for obj in listing.get("items") or []:
        name = obj["metadata"]["name"]
        finalizers = obj["metadata"].get("finalizers") or []
        with contextlib.suppress(NotFound):
            if res.FINALIZER in finalizers:
                left = [f for f in finalizers if f != res.FINALIZER]
                patch = {"metadata": {"finalizers": left or None}}
                await api.merge_patch(res.path(namespace, res.SANDBOXES, name), patch, what=f"release Sandbox {name}")
                done.finalizers_removed += 1
            await api.delete(res.path(namespace, res.SANDBOXES, name), what=f"delete Sandbox {name}")
            done.sandboxes_deleted += 1
    pods = await api.list(core_path(namespace, "pods"), what="list sandbox pods", selector=selector)
    for pod in pods.get("items") or []:
        name = pod["metadata"]["name"]
        with contextlib.suppress(NotFound):
            await api.delete(core_path(namespace, "pods", name), what=f"delete pod {name}")
            done.pods_deleted += 1
        secret = manifests.secret_name(name)
        with contextlib.suppress(NotFound):  # usually gone with its pod already (ownerReference)
            await api.delete(core_path(namespace, "secrets", secret), what=f"delete secret {secret}")
            done.secrets_deleted += 1


async def run(args: argparse.Namespace) -> Released:
    config = KubernetesConfig.model_validate(
        {"namespace": args.namespace, "owner": args.owner, "kubeconfig": args.kubeconfig, "context": args.context}
    )
    api = await KubeApi.connect(config)
    done = Released()
    try:
        if args.deployment:
            done.control_plane_stopped = await stop_control_plane(
                api,
                args.control_plane_namespace,
                args.deployment,
                args.control_plane_selector,
                timeout_s=args.stop_timeout,
            )
        await release_sandboxes(api, args.namespace, args.owner, done)
    finally:
        await api.close()
    return done


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sandbox.operator.uninstall", description=__doc__.split("\n")[0])
    parser.add_argument("--namespace", required=True, help="the sandbox namespace")
    parser.add_argument("--owner", required=True, help="the sandbox.owner label of this release's sandboxes")
    parser.add_argument("--kubeconfig", default=None, help="a kubeconfig file; none: the pod's ServiceAccount")
    parser.add_argument("--context", default=None)
    parser.add_argument("--deployment", default="", help="the control plane's Deployment, stopped first; none: skip")
    parser.add_argument("--control-plane-namespace", default="", help="the Deployment's namespace")
    parser.add_argument("--control-plane-selector", default="", help="label selector of the control plane's pods")
    parser.add_argument("--stop-timeout", type=float, default=60.0, help="seconds to wait for its pods to go")
    args = parser.parse_args(argv)
    if args.deployment and not (args.control_plane_namespace and args.control_plane_selector):
        parser.error("--deployment needs --control-plane-namespace and --control-plane-selector")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        done = asyncio.run(run(args))
    except (SandboxError, TimeoutError) as e:
        LOGGER.error("uninstall clean-up failed: %s", getattr(e, "message", str(e)))
        return 1
    LOGGER.info(
        "released: control plane stopped=%s, finalizers removed=%d, Sandbox objects deleted=%d, pods deleted=%d, "
        "secrets deleted=%d",
        done.control_plane_stopped,
        done.finalizers_removed,
        done.sandboxes_deleted,
        done.pods_deleted,
        done.secrets_deleted,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
