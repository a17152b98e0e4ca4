"""Pod Security admission, as the API server's built-in plugin enforces it: a pod created in a namespace labelled
``pod-security.kubernetes.io/enforce: restricted`` (or ``baseline``) that breaks the level's rules is refused with 403
Forbidden, in the plugin's words:

    pods "x" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container
    "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (...), ...

The checks (the Pod Security Standards, "latest"): baseline: no host namespaces, no privileged container, no
hostPath volume, no host port, capabilities added only from the default set, no unconfined seccomp profile;
restricted adds: volumes of the allowed types only, ``allowPrivilegeEscalation: false`` in every container,
``runAsNonRoot: true`` (pod or every container) and no ``runAsUser: 0``, a seccomp profile RuntimeDefault or
Localhost (pod or every container), capabilities dropping ALL and adding at most NET_BIND_SERVICE. Init containers
and ephemeral containers are checked as containers. The ``warn`` and ``audit`` modes and exemptions are not
imitated."""

from __future__ import annotations

from typing import Any

from sandbox.testing.fake_kube.rest import ApiError

ENFORCE = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")
BASELINE_CAPS = frozenset(
    {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
     "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
)  # fmt: skip
RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)


def admit_pod(namespace: dict[str, Any] | None, pod: dict[str, Any]) -> None:
    """Raise the plugin's 403 if the namespace enforces a level the pod breaks."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(ENFORCE, "privileged")
    if level not in LEVELS or level == "privileged":
        return
    broken = violations(pod, restricted=level == "restricted")
    if broken:
        name = (pod.get("metadata") or {}).get("name", "")
        version = labels.get(f"{ENFORCE}-version", "latest")
        raise ApiError(
            403,
            "Forbidden",
            f'pods "{name}" is forbidden: violates PodSecurity "{level}:{version}": ' + ", ".join(broken),
            name=name,
            kind="pods",
        )


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or []),
            *(spec.get("ephemeralContainers") or [])]  # fmt: skip


def _quoted(names: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


def _which(names: list[str]) -> str:
    return f"container{'s' if len(names) > 1 else ''} {_quoted(names)}"


def violations(pod: dict[str, Any], *, restricted: bool) -> list[str]:
    """What the pod breaks, each as the plugin words it, in the plugin's order."""
    spec = pod.get("spec") or {}
    pod_sc = spec.get("securityContext") or {}
    containers = _containers(spec)
    found: list[str] = []
    hosts = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if hosts:
        found.append(f"host namespaces ({', '.join(hosts)})")
    privileged = [c["name"] for c in containers if (c.get("securityContext") or {}).get("privileged")]
    if privileged:
        found.append(f"privileged ({_which(privileged)} must not set securityContext.privileged=true)")
    added = {c["name"]: [a for a in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
                         if a not in BASELINE_CAPS] for c in containers}  # fmt: skip
    if any(added.values()):
        names = [n for n, a in added.items() if a]
        caps = sorted({a for a in added.values() for a in a})
        found.append(f"non-default capabilities ({_which(names)} must not include {_quoted(caps)} in "
                     "securityContext.capabilities.add)")  # fmt: skip
    host_path = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_path:
        found.append(f"hostPath volumes (volume{'s' if len(host_path) > 1 else ''} {_quoted(host_path)})")
    ports = [str(p["hostPort"]) for c in containers for p in c.get("ports") or [] if p.get("hostPort")]
    if ports:
        found.append(f"hostPort (container uses hostPort {', '.join(ports)})")
    if ((pod_sc.get("seccompProfile") or {}).get("type")) == "Unconfined":
        found.append('seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")')
    if not restricted:
        return found
    kinds = [v["name"] for v in spec.get("volumes") or [] if not (set(v) - {"name"}) & RESTRICTED_VOLUMES]
    if kinds:
        found.append(f"restricted volume types (volume{'s' if len(kinds) > 1 else ''} {_quoted(kinds)})")
    escalating = [c["name"] for c in containers
                  if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False]  # fmt: skip
    if escalating:
        found.append(f"allowPrivilegeEscalation != false ({_which(escalating)} must set "
                     "securityContext.allowPrivilegeEscalation=false)")  # fmt: skip
    unrestricted = [c["name"] for c in containers if not _drops_all(c)]
    if unrestricted:
        found.append(f'unrestricted capabilities ({_which(unrestricted)} must set securityContext.capabilities.drop='
                     '["ALL"])')  # fmt: skip
    root = [c["name"] for c in containers if not _set(c, pod_sc, "runAsNonRoot", True)]
    if root:
        found.append(f"runAsNonRoot != true (pod or {_which(root)} must set securityContext.runAsNonRoot=true)")
    uid0 = [c["name"] for c in containers if (c.get("securityContext") or {}).get("runAsUser") == 0]
    if pod_sc.get("runAsUser") == 0 or uid0:
        found.append("runAsUser=0 (pod and containers must not set runAsUser=0)")
    seccomp = [c["name"] for c in containers if not _seccomp(c, pod_sc)]
    if seccomp:
        found.append(f'seccompProfile (pod or {_which(seccomp)} must set securityContext.seccompProfile.type to '
                     '"RuntimeDefault" or "Localhost")')  # fmt: skip
    return found


def _drops_all(container: dict[str, Any]) -> bool:
    caps = (container.get("securityContext") or {}).get("capabilities") or {}
    return "ALL" in (caps.get("drop") or []) and set(caps.get("add") or []) <= {"NET_BIND_SERVICE"}


def _set(container: dict[str, Any], pod_sc: dict[str, Any], key: str, value: Any) -> bool:
    own = (container.get("securityContext") or {}).get(key)
    return own == value if own is not None else pod_sc.get(key) == value


def _seccomp(container: dict[str, Any], pod_sc: dict[str, Any]) -> bool:
    own = ((container.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    kind = own if own is not None else (pod_sc.get("seccompProfile") or {}).get("type")
    return kind in ("RuntimeDefault", "Localhost")
