"""A pod spec as ``docker create`` arguments: what the fake kubelet (realize.py) runs for a pod.

Kept from the pod: the first container's image, command (ENTRYPOINT) and args (CMD), env (values, and valueFrom
of the pod's name and namespace or a Secret key), workingDir, the user and group (runAsUser/runAsGroup; fsGroup as a
supplementary group), capabilities (drop/add), allowPrivilegeEscalation false (no-new-privileges), a read-only root
when asked, CPU and memory limits, the hostname. Volumes: a Secret becomes files in a host directory bind-mounted
read-only (mode ``defaultMode``, group ``fsGroup``, as the kubelet writes them); an emptyDir a host directory, or
with medium Memory /dev/shm's size (or a tmpfs elsewhere); a PVC a host directory shared by every pod that mounts
it (fsGroup-owned, setgid, as the kubelet prepares it). Every container runs with an init (Docker's --init; the
pause process does it in a pod) on the harness's internal network. ``runAsNonRoot`` with a root user is refused as
the kubelet refuses it. Not realized: more than one container, init containers, probes (the pod is Ready once its
container runs), NetworkPolicies (every realized pod can reach every other on the internal network).

Blocking (file writes): call from a worker thread.
"""

from __future__ import annotations

import base64
import os
import re
from dataclasses import dataclass
from typing import Any


class NotRunnable(Exception):
    """The container cannot be made (yet): the waiting reason and message the kubelet would report."""

    def __init__(self, reason: str, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.reason, self.message, self.retry = reason, message, retry


@dataclass(frozen=True)
class Context:
    """What the fake kubelet knows besides the pod."""

    workdir: str
    network: str
    labels: dict[str, str]
    image_user: str
    secrets: dict[str, dict[str, str]]
    """Secret name -> its data (base64), for the pod's namespace."""
    claims: set[str]
    """Names of the PVCs that exist in the pod's namespace."""


_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(raw: str | int | float) -> float:
    """A Kubernetes quantity ("500m", "2", "2048Mi", "1Gi") as a number (cores, or bytes)."""
    m = re.fullmatch(r"([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?", str(raw).strip())
    if not m:
        raise NotRunnable("CreateContainerConfigError", f"cannot read the quantity {raw!r}", retry=False)
    number, unit = float(m.group(1)), m.group(2) or ""
    return number / 1000 if unit == "m" else number * _UNITS[unit]


def container_args(pod: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """The keyword arguments of ``docker.containers.create`` for ``pod``; raises :class:`NotRunnable`."""
    meta, spec = pod["metadata"], pod["spec"]
    containers = spec.get("containers") or []
    if len(containers) != 1 or spec.get("initContainers"):
        raise NotRunnable("CreateContainerConfigError", "the fake kubelet runs pods of one container", retry=False)
    c = containers[0]
    pod_sc, sc = spec.get("securityContext") or {}, c.get("securityContext") or {}
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    fs_group = pod_sc.get("fsGroup")
    user = str(uid) if uid is not None else ctx.image_user.split(":")[0]
    if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) and user in ("", "0", "root"):
        message = "container has runAsNonRoot and image will run as root"
        raise NotRunnable("CreateContainerConfigError", message, retry=False)
    if sc.get("privileged"):
        raise NotRunnable(
            "CreateContainerConfigError", "the fake kubelet never runs privileged containers", retry=False
        )
    root = os.path.join(ctx.workdir, "pods", meta["uid"])
    binds: dict[str, dict[str, str]] = {}
    tmpfs: dict[str, str] = {}
    args: dict[str, Any] = {}
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for mount in c.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise NotRunnable("CreateContainerConfigError", f"no volume {mount['name']!r}", retry=False)
        path, read_only = mount["mountPath"], bool(mount.get("readOnly"))
        if "secret" in volume:
            host = _secret_dir(os.path.join(root, mount["name"]), volume["secret"], ctx, fs_group)
            binds[host] = {"bind": path, "mode": "ro"}
        elif "emptyDir" in volume:
            size = volume["emptyDir"].get("sizeLimit")
            if volume["emptyDir"].get("medium") == "Memory":
                if path == "/dev/shm":
                    args["shm_size"] = int(quantity(size)) if size else 64 * 2**20
                else:
                    tmpfs[path] = f"size={int(quantity(size))},mode=1777" if size else "mode=1777"
            else:
                host = os.path.join(root, mount["name"])
                os.makedirs(host, exist_ok=True)
                os.chmod(host, 0o777)
                binds[host] = {"bind": path, "mode": "ro" if read_only else "rw"}
        elif "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            if claim not in ctx.claims:
                raise NotRunnable("ContainerCreating", f'persistentvolumeclaim "{claim}" not found', retry=True)
            host = os.path.join(ctx.workdir, "claims", meta["namespace"], claim)
            _shared_dir(host, fs_group)
            ro = read_only or bool(volume["persistentVolumeClaim"].get("readOnly"))
            binds[host] = {"bind": path, "mode": "ro" if ro else "rw"}
        else:
            raise NotRunnable("CreateContainerConfigError", f"volume {mount['name']!r}: unsupported type", retry=False)
    limits = (c.get("resources") or {}).get("limits") or {}
    if "cpu" in limits:
        args["nano_cpus"] = int(quantity(limits["cpu"]) * 1e9)
    if "memory" in limits:
        args["mem_limit"] = args["memswap_limit"] = int(quantity(limits["memory"]))
    caps = sc.get("capabilities") or {}
    if uid is not None:
        args["user"] = f"{uid}:{gid}" if gid is not None else str(uid)
    if fs_group is not None:
        args["group_add"] = [str(fs_group)]
    if sc.get("allowPrivilegeEscalation") is False:
        args["security_opt"] = ["no-new-privileges"]
    if c.get("command"):
        args["entrypoint"] = list(c["command"])
    if c.get("args"):
        args["command"] = list(c["args"])
    if c.get("workingDir"):
        args["working_dir"] = c["workingDir"]
    return {
        **args,
        "image": c["image"],
        "name": f"fk-{ctx.labels.get('sandbox.owner', 'x')}-{meta['namespace']}-{meta['name']}"[:200],
        "hostname": (spec.get("hostname") or meta["name"])[:63],
        "labels": {**ctx.labels, "fake-kube.pod": f"{meta['namespace']}.{meta['name']}", "fake-kube.uid": meta["uid"]},
        "environment": _env(c, meta, ctx),
        "init": True,
        "network": ctx.network,
        "cap_drop": list(caps.get("drop") or []),
        "cap_add": list(caps.get("add") or []),
        "read_only": bool(sc.get("readOnlyRootFilesystem")),
        "volumes": binds,
        "tmpfs": tmpfs,
    }


def _env(container: dict[str, Any], meta: dict[str, Any], ctx: Context) -> dict[str, str]:
    env = {}
    for item in container.get("env") or []:
        if "value" in item or "valueFrom" not in item:
            env[item["name"]] = str(item.get("value", ""))
            continue
        source = item["valueFrom"]
        field = (source.get("fieldRef") or {}).get("fieldPath")
        if field in ("metadata.name", "metadata.namespace"):
            env[item["name"]] = meta[field.split(".")[1]]
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            data = ctx.secrets.get(ref["name"])
            if data is None or ref["key"] not in data:
                raise NotRunnable("CreateContainerConfigError", f'secret "{ref["name"]}" not found', retry=True)
            env[item["name"]] = base64.b64decode(data[ref["key"]]).decode()
        else:
            raise NotRunnable("CreateContainerConfigError", f"env {item['name']}: unsupported valueFrom", retry=False)
    return env


def _secret_dir(host: str, volume: dict[str, Any], ctx: Context, fs_group: int | None) -> str:
    name = volume["secretName"]
    data = ctx.secrets.get(name)
    if data is None:
        raise NotRunnable("ContainerCreating", f'MountVolume.SetUp failed: secret "{name}" not found', retry=True)
    os.makedirs(host, exist_ok=True)
    os.chmod(host, 0o755)
    mode = int(volume.get("defaultMode", 0o644))
    for key, value in data.items():
        path = os.path.join(host, key)
        with open(path, "wb") as f:
            f.write(base64.b64decode(value))
        if os.geteuid() == 0 and fs_group is not None:
            os.chown(path, 0, int(fs_group))
            os.chmod(path, mode)
        else:
            os.chmod(path, mode | 0o444)
    return host


def _shared_dir(host: str, fs_group: int | None) -> None:
    os.makedirs(host, exist_ok=True)
    if os.geteuid() == 0 and fs_group is not None:
        os.chown(host, 0, int(fs_group))
        os.chmod(host, 0o2775)
    else:
        os.chmod(host, 0o777)
