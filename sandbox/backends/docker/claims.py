"""Claims on the Docker host: one JSON file per held instance, in ``<socket_root>/.claims/``.

That folder is outside the per-instance directory mounted into the container, so a sandbox can neither read
nor change its claim. Blocking file I/O: call these from a worker thread.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

CLAIMS_DIR = ".claims"


def claim_path(socket_root: str, instance_id: str) -> str:
    return os.path.join(socket_root, CLAIMS_DIR, f"{instance_id}.json")


def write_claim(socket_root: str, instance_id: str, claim: dict[str, Any]) -> None:
    """Replace the instance's claim atomically."""
    path = claim_path(socket_root, instance_id)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(claim, separators=(",", ":")))  # dumps: json.dump encodes in Python, chunk by chunk
    os.replace(tmp, path)


def remove_claim(socket_root: str, instance_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(claim_path(socket_root, instance_id))


def read_claims(socket_root: str) -> dict[str, dict[str, Any]]:
    """Instance id -> claim; a file removed meanwhile or half-written by a crash is no claim."""
    folder = os.path.join(socket_root, CLAIMS_DIR)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, name)) as f:
                claim = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(claim, dict):
            found[name.removesuffix(".json")] = claim
    return found
