"""The file API on a real sandbox: confinement to its roots, binary round trips, shared volumes."""

from __future__ import annotations

import os
import secrets

import pytest

from sandbox.errors import NotFound, PermissionDenied
from tests.conftest import SandboxFactory

pytestmark = pytest.mark.docker


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../etc/passwd", "'..' traversal"),
        ("/workspace/../etc/passwd", "'..' traversal"),
        ("/etc/passwd", "outside the allowed roots"),
        ("/proc/self/environ", "outside the allowed roots"),
        ("escape/passwd", "through a symlink"),
        ("escape-file", "through a symlink"),
    ],
)
async def test_file_api_refuses_paths_outside_its_roots(make_sandbox: SandboxFactory, path: str, reason: str) -> None:
    sb = await make_sandbox("terminal")
    made = await sb.agent.exec("ln -s /etc /workspace/escape && ln -s /etc/passwd /workspace/escape-file")
    assert made.exit_code == 0, made.stderr
    with pytest.raises(PermissionDenied, match=reason):
        await sb.agent.read_file(path)
    with pytest.raises(PermissionDenied, match=reason):
        await sb.agent.write_file(path, b"owned")
    with pytest.raises(PermissionDenied):
        await sb.agent.list_dir(path.rsplit("/", 1)[0] + "/" if "/" in path else path)
    untouched = await sb.agent.exec("stat -c %s /etc/passwd && ls /workspace")
    assert "owned" not in untouched.stdout


async def test_file_round_trip_binary_and_listing(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    payload = os.urandom(5 * 1024 * 1024)
    assert await sb.agent.write_file("/workspace/data/blob.bin", payload) == len(payload)
    assert await sb.agent.read_file("data/blob.bin") == payload
    assert await sb.agent.read_file("data/blob.bin", offset=10, length=5) == payload[10:15]
    shell_view = await sb.agent.exec("sha256sum /workspace/data/blob.bin | cut -d' ' -f1")
    import hashlib

    assert shell_view.stdout.strip() == hashlib.sha256(payload).hexdigest()
    await sb.agent.write_file("data/log.txt", b"a\n")
    await sb.agent.write_file("data/log.txt", b"b\n", append=True)
    assert (await sb.agent.exec("cat /workspace/data/log.txt")).stdout == "a\nb\n"
    names = {(f.name, f.type) for f in await sb.agent.list_dir("/workspace/data")}
    assert names == {("blob.bin", "file"), ("log.txt", "file")}
    await sb.agent.delete("data", recursive=True)
    with pytest.raises(NotFound):
        await sb.agent.stat("data/log.txt")


async def test_named_volume_is_shared_read_write_and_read_only(make_sandbox: SandboxFactory) -> None:
    name = f"vol-{secrets.token_hex(3)}"
    writer = await make_sandbox("terminal", volumes=[{"name": name, "path": "/workspace/shared"}])
    reader = await make_sandbox("terminal", volumes=[{"name": name, "path": "/workspace/shared", "read_only": True}])
    wrote = await writer.agent.exec("echo from-writer > /workspace/shared/note.txt")
    assert wrote.exit_code == 0, wrote.stderr
    assert await reader.agent.read_file("/workspace/shared/note.txt") == b"from-writer\n"
    refused = await reader.agent.exec("echo x > /workspace/shared/other.txt")
    assert refused.exit_code != 0 and "Read-only file system" in refused.stderr
