"""Hostile paths on the file API of a real sandbox: symlinks planted by code in the sandbox that point at secrets,
at another root (``/proc/1/root``), at device files; device files and FIFOs themselves. Every operation is refused
with a clear error or stays inside the allowed roots, nothing outside changes, and the agent keeps answering."""

from __future__ import annotations

import asyncio

import pytest

from sandbox.errors import InvalidArgument, PermissionDenied, SandboxError
from tests.conftest import SandboxFactory

pytestmark = pytest.mark.docker

# Planted in /workspace by "hostile" code running as the sandbox user: name -> target.
LINKS = {
    "shadow": "/etc/shadow",
    "passwd": "/etc/passwd",
    "pid1-root": "/proc/1/root",
    "pid1-root-etc": "/proc/1/root/etc",
    "self-root": "/proc/self/root/etc/passwd",
    "host-mem": "/dev/mem",
    "zero": "/dev/zero",
    "random": "/dev/urandom",
    "agent-socket": "/run/sandbox/agent.sock",
    "relative-up": "../../etc/hostname",
}


async def test_symlinks_out_of_the_roots_are_refused_for_every_operation(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    plant = " && ".join(f"ln -s {target} /workspace/{name}" for name, target in LINKS.items())
    made = await sb.agent.exec(plant)
    assert made.exit_code == 0, made.stderr
    before = await sb.agent.exec("sha256sum /etc/passwd /etc/hostname; ls -la /etc | wc -l")
    for name in LINKS:
        for path in (name, f"/workspace/{name}", f"/workspace/{name}/x"):
            with pytest.raises((PermissionDenied, InvalidArgument)) as refused:
                await sb.agent.read_file(path)
            assert "outside the allowed roots" in refused.value.message, refused.value.message
            for append in (False, True):
                try:
                    await sb.agent.write_file(path, b"owned", append=append)
                except PermissionDenied:
                    continue
                raise AssertionError(f"writing {path!r} (append={append}) was not refused")
        with pytest.raises(PermissionDenied):
            await sb.agent.list_dir(f"/workspace/{name}")
    # The links themselves are still there (nothing followed them), and nothing outside changed.
    assert set((await sb.agent.exec("ls /workspace")).stdout.split()) == set(LINKS)
    assert (await sb.agent.exec("sha256sum /etc/passwd /etc/hostname; ls -la /etc | wc -l")).stdout == before.stdout
    # Deleting through such a link is refused too; the link and its target stay.
    with pytest.raises(PermissionDenied, match="outside the allowed roots"):
        await sb.agent.delete("/workspace/passwd")
    assert (await sb.agent.exec("test -f /etc/passwd && test -L /workspace/passwd && echo kept")).stdout == "kept\n"
    # A symlink loop: a clear error on reading; writing replaces the link with a file, inside the workspace.
    await sb.agent.exec("ln -s loop-b /workspace/loop-a && ln -s loop-a /workspace/loop-b")
    with pytest.raises(PermissionDenied, match="Too many levels of symbolic links"):
        await sb.agent.read_file("loop-a")
    await sb.agent.write_file("loop-a", b"now a file")
    assert (await sb.agent.exec("cat /workspace/loop-a")).stdout == "now a file"


async def test_a_symlink_inside_the_roots_is_followed_and_stays_inside(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    await sb.agent.exec("mkdir -p /workspace/real && echo inside > /workspace/real/f && ln -s real /workspace/alias")
    assert await sb.agent.read_file("/workspace/alias/f") == b"inside\n"
    await sb.agent.write_file("/workspace/alias/g", b"written")
    assert (await sb.agent.exec("cat /workspace/real/g")).stdout == "written"
    # A link to the other root (/tmp) is inside the roots too.
    await sb.agent.exec("echo tmp > /tmp/t && ln -s /tmp/t /workspace/to-tmp")
    assert await sb.agent.read_file("to-tmp") == b"tmp\n"


async def test_device_files_and_fifos_are_refused_without_hanging_the_agent(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    for device in ("/dev/mem", "/dev/kmsg", "/dev/zero", "/dev/null", "/dev/sda", "/proc/kcore", "/sys/kernel"):
        with pytest.raises(PermissionDenied, match="outside the allowed roots"):
            await sb.agent.read_file(device)
    # No device can be made inside the roots (CAP_MKNOD is dropped), so code in the sandbox cannot plant one.
    mknod = await sb.agent.exec("mknod /workspace/mem c 1 1 2>&1; mknod /tmp/null c 1 3 2>&1; ls /workspace /tmp")
    assert "Operation not permitted" in mknod.stdout and "mem" not in mknod.stdout.split(), mknod.stdout
    # A FIFO in the workspace: a read must not wait for a writer that never comes.
    await sb.agent.exec("mkfifo /workspace/pipe")
    outcome: bytes | SandboxError
    try:
        outcome = await asyncio.wait_for(sb.agent.read_file("/workspace/pipe"), 15)
    except SandboxError as e:
        outcome = e
    assert isinstance(outcome, InvalidArgument) and "not a regular file" in outcome.message, outcome
    # Writing replaces the FIFO with a file (an atomic rename); appending to it is refused, not blocked on.
    try:
        appended: object = await asyncio.wait_for(sb.agent.write_file("/workspace/pipe", b"x", append=True), 15)
    except SandboxError as e:
        appended = e
    assert isinstance(appended, SandboxError), appended
    assert (await asyncio.wait_for(sb.agent.exec("echo alive"), 10)).stdout == "alive\n"
