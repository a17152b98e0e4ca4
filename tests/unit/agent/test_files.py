"""The agent's file operations, run in-process on this machine (no container), confined to roots under tmp_path."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from sandbox.agent.app import AgentApp, AgentConfig
from sandbox.agent.errors import AgentError
from sandbox.agent.files import Files
from sandbox.agent.server import AgentServer
from sandbox.backends.agent_client import AgentClient
from sandbox.errors import PermissionDenied
from sandbox.protocol import ErrorCode

Op = Callable[[dict[str, Any], bytes], Awaitable[tuple[dict[str, Any], bytes]]]
SECRET = b"outside the roots"


class Tree:
    """Two roots (``ws``, the default directory, and ``scratch``) and, beside them, a directory the API must not
    reach, with symlinks from inside ``ws`` leading out to it."""

    def __init__(self, base: Path) -> None:
        self.ws = base / "ws"
        self.scratch = base / "scratch"
        self.outside = base / "outside"
        for d in (self.ws, self.scratch, self.outside):
            d.mkdir()
        (self.outside / "secret.txt").write_bytes(SECRET)
        (self.ws / "escape").symlink_to(self.outside)
        (self.ws / "escape-file").symlink_to(self.outside / "secret.txt")
        (base / "ws-sibling").mkdir()  # shares the root's name as a prefix
        self.files = Files(roots=[str(self.ws), str(self.scratch)], default_dir=str(self.ws))

    def outside_listing(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in self.outside.iterdir()}


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


async def call(op: Op, data: bytes = b"", **args: Any) -> tuple[dict[str, Any], bytes]:
    return await op(args, data)


async def refused(op: Op, code: str, data: bytes = b"", **args: Any) -> str:
    """Run ``op``, expecting an AgentError with ``code``; returns its message."""
    with pytest.raises(AgentError) as caught:
        await op(args, data)
    assert caught.value.code == code, caught.value.message
    return caught.value.message


# Reading


async def test_read_whole_file_and_ranges(tree: Tree) -> None:
    payload = os.urandom(1000)
    (tree.ws / "blob.bin").write_bytes(payload)
    meta, data = await call(tree.files.read, path="blob.bin")
    assert data == payload
    assert meta == {"path": str(tree.ws / "blob.bin"), "size": 1000, "offset": 0, "length": 1000}
    assert (await call(tree.files.read, path=str(tree.ws / "blob.bin"), offset=10, length=5))[1] == payload[10:15]
    assert (await call(tree.files.read, path="blob.bin", offset=990))[1] == payload[990:]
    assert (await call(tree.files.read, path="blob.bin", length=0))[1] == b""
    meta, data = await call(tree.files.read, path="blob.bin", offset=5000, length=10)
    assert (data, meta["length"], meta["size"]) == (b"", 0, 1000)
    await refused(tree.files.read, ErrorCode.BAD_REQUEST, path="blob.bin", offset=-1)
    await refused(tree.files.read, ErrorCode.BAD_REQUEST, path=".")  # a directory
    assert "does not exist" in await refused(tree.files.read, ErrorCode.NOT_FOUND, path="missing.txt")


# Writing


async def test_write_replaces_atomically(tree: Tree) -> None:
    target = tree.ws / "notes.txt"
    target.write_bytes(b"old content")
    old_inode = target.stat().st_ino
    with open(target, "rb") as reader:  # a reader that opened the old file keeps reading all of it
        meta, _ = await call(tree.files.write, b"new", path="notes.txt", mode=0o600)
        assert reader.read() == b"old content"
    assert meta == {"path": str(target), "size": 3}
    assert target.read_bytes() == b"new"
    assert target.stat().st_ino != old_inode, "the new content must be renamed into place, not written over"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tree.ws.iterdir()) == ["escape", "escape-file", "notes.txt"], "temporary left"


async def test_write_makes_parents_unless_told_not_to(tree: Tree) -> None:
    await call(tree.files.write, b"deep", path="a/b/c.txt")
    assert (tree.ws / "a" / "b" / "c.txt").read_bytes() == b"deep"
    await call(tree.files.write, b"second root", path=str(tree.scratch / "x.txt"))
    assert (tree.scratch / "x.txt").read_bytes() == b"second root"
    await refused(tree.files.write, ErrorCode.NOT_FOUND, b"x", path="nope/c.txt", make_parents=False)
    assert not (tree.ws / "nope").exists()
    await refused(tree.files.write, ErrorCode.BAD_REQUEST, b"x", path="a/b")  # a directory
    await refused(tree.files.write, ErrorCode.BAD_REQUEST, b"x", path="m.txt", mode=0o17777)


async def test_append_creates_then_appends(tree: Tree) -> None:
    assert (await call(tree.files.write, b"a\n", path="log.txt", append=True))[0]["size"] == 2
    assert (await call(tree.files.write, b"b\n", path="log.txt", append=True))[0]["size"] == 4
    await call(tree.files.write, b"\x00\xff", path="log.txt", append=True)
    assert (tree.ws / "log.txt").read_bytes() == b"a\nb\n\x00\xff"


# Listing, stat, delete, mkdir


async def test_list_describes_entries_sorted(tree: Tree) -> None:
    (tree.ws / "data").mkdir()
    (tree.ws / "data" / "b.txt").write_bytes(b"12345")
    (tree.ws / "data" / "a").mkdir()
    (tree.ws / "data" / "link").symlink_to("b.txt")
    meta, _ = await call(tree.files.list_dir, path="data")
    assert meta["path"] == str(tree.ws / "data") and meta["truncated"] is False
    entries = [(e["name"], e["type"], e["path"]) for e in meta["entries"]]
    assert entries == [
        ("a", "dir", str(tree.ws / "data" / "a")),
        ("b.txt", "file", str(tree.ws / "data" / "b.txt")),
        ("link", "symlink", str(tree.ws / "data" / "link")),
    ]
    assert meta["entries"][1]["size"] == 5
    default, _ = await call(tree.files.list_dir)
    assert default["path"] == str(tree.ws) and "data" in {e["name"] for e in default["entries"]}
    await refused(tree.files.list_dir, ErrorCode.NOT_FOUND, path="data/b.txt")


async def test_stat_files_and_directories(tree: Tree) -> None:
    (tree.ws / "f.bin").write_bytes(b"x" * 42)
    os.chmod(tree.ws / "f.bin", 0o640)
    meta, _ = await call(tree.files.stat, path="f.bin")
    assert (meta["name"], meta["type"], meta["size"], meta["mode"]) == ("f.bin", "file", 42, 0o640)
    assert meta["mtime"] == pytest.approx((tree.ws / "f.bin").stat().st_mtime)
    assert (await call(tree.files.stat, path=str(tree.scratch)))[0]["type"] == "dir"
    await refused(tree.files.stat, ErrorCode.NOT_FOUND, path="gone")


async def test_delete_files_and_directories(tree: Tree) -> None:
    (tree.ws / "d" / "e").mkdir(parents=True)
    (tree.ws / "d" / "e" / "f.txt").write_bytes(b"x")
    (tree.ws / "g.txt").write_bytes(b"y")
    assert (await call(tree.files.delete, path="g.txt"))[0] == {"deleted": str(tree.ws / "g.txt")}
    assert not (tree.ws / "g.txt").exists()
    assert "recursive" in await refused(tree.files.delete, ErrorCode.BAD_REQUEST, path="d")
    assert (tree.ws / "d" / "e" / "f.txt").exists(), "a refused delete must not delete anything"
    await call(tree.files.delete, path="d", recursive=True)
    assert not (tree.ws / "d").exists()
    await refused(tree.files.delete, ErrorCode.NOT_FOUND, path="g.txt")
    for root in (tree.ws, tree.scratch):
        await refused(tree.files.delete, ErrorCode.PERMISSION_DENIED, path=str(root), recursive=True)
        assert root.is_dir()


async def test_mkdir_makes_parents_and_is_idempotent(tree: Tree) -> None:
    meta, _ = await call(tree.files.mkdir, path="x/y/z")
    assert meta == {"path": str(tree.ws / "x" / "y" / "z")} and (tree.ws / "x" / "y" / "z").is_dir()
    assert (await call(tree.files.mkdir, path="x/y/z"))[0] == meta


# Confinement


TRAVERSALS = ["../outside/secret.txt", "a/../../outside/secret.txt", "a/..", "..\\outside\\secret.txt"]
ESCAPES = ["escape/secret.txt", "escape-file", "escape/new.txt", "escape"]


def every_op(files: Files) -> list[tuple[str, Op, dict[str, Any]]]:
    return [
        ("read", files.read, {}),
        ("write", files.write, {}),
        ("append", files.write, {"append": True}),
        ("list", files.list_dir, {}),
        ("stat", files.stat, {}),
        ("delete", files.delete, {"recursive": True}),
        ("mkdir", files.mkdir, {}),
    ]


@pytest.mark.parametrize("path", [*TRAVERSALS, "{ws}/../outside/secret.txt", "{ws}/../ws/inside.txt"])
async def test_dot_dot_is_refused_by_every_op(tree: Tree, path: str) -> None:
    path = path.format(ws=tree.ws)
    (tree.ws / "inside.txt").write_bytes(b"inside")
    for name, op, extra in every_op(tree.files):
        message = await refused(op, ErrorCode.PERMISSION_DENIED, b"owned", path=path, **extra)
        assert "'..' traversal" in message, (name, message)
    assert tree.outside_listing() == {"secret.txt": SECRET}
    assert (tree.ws / "inside.txt").read_bytes() == b"inside", "even a '..' that stays inside is refused"


@pytest.mark.parametrize("path", ESCAPES)
async def test_symlinks_leading_outside_are_refused_by_every_op(tree: Tree, path: str) -> None:
    for name, op, extra in every_op(tree.files):
        message = await refused(op, ErrorCode.PERMISSION_DENIED, b"owned", path=path, **extra)
        assert "through a symlink" in message and "outside the allowed roots" in message, (name, message)
    assert tree.outside_listing() == {"secret.txt": SECRET}, "something outside the roots changed"
    assert (tree.ws / "escape").is_symlink() and (tree.ws / "escape-file").is_symlink()


@pytest.mark.parametrize("path", ["{outside}/secret.txt", "{base}/ws-sibling/x", "/etc/passwd", "/"])
async def test_absolute_paths_outside_the_roots_are_refused(tree: Tree, path: str) -> None:
    path = path.format(outside=tree.outside, base=tree.ws.parent)
    for name, op, extra in every_op(tree.files):
        message = await refused(op, ErrorCode.PERMISSION_DENIED, b"owned", path=path, **extra)
        assert "outside the allowed roots" in message and "symlink" not in message, (name, message)
    assert tree.outside_listing() == {"secret.txt": SECRET}
    assert list((tree.ws.parent / "ws-sibling").iterdir()) == []


async def test_symlinks_that_stay_inside_the_roots_are_followed(tree: Tree) -> None:
    (tree.scratch / "shared.txt").write_bytes(b"shared")
    (tree.ws / "to-scratch").symlink_to(tree.scratch / "shared.txt")
    meta, data = await call(tree.files.read, path="to-scratch")
    assert data == b"shared" and meta["path"] == str(tree.scratch / "shared.txt")


async def test_a_symlink_swapped_in_after_the_check_is_not_followed(tree: Tree) -> None:
    # resolve() has passed a path whose last component then became a symlink: O_NOFOLLOW refuses it.
    swapped = str(tree.ws / "escape-file")
    with pytest.raises(AgentError) as caught:
        tree.files._read(swapped, 0, None)
    assert caught.value.code == ErrorCode.PERMISSION_DENIED
    with pytest.raises(AgentError) as caught:
        tree.files._write(swapped, b"owned", 0o644, True, True)
    assert caught.value.code == ErrorCode.PERMISSION_DENIED
    assert tree.outside_listing() == {"secret.txt": SECRET}


async def test_bad_paths_are_bad_requests(tree: Tree) -> None:
    for path in ("", None, 5, "a\x00b"):
        await refused(tree.files.stat, ErrorCode.BAD_REQUEST, path=path)


# Through the agent's socket: the refusal reaches the client as PermissionDenied.


@pytest_asyncio.fixture
async def agent(tree: Tree, tmp_path: Path) -> AsyncIterator[AgentClient]:
    config = AgentConfig(
        kind="terminal",
        socket_path=str(tmp_path / "a.sock"),
        roots=(str(tree.ws), str(tree.scratch)),
        workspace=str(tree.ws),
        display=":99",
    )
    app = AgentApp(config, logger=logging.getLogger("test-agent-files"))
    server = AgentServer(app.ops(), tunnel_ports=frozenset(), max_request_bytes=1 << 20, logger=app._log)
    task = asyncio.create_task(server.serve(config.socket_path))
    client = AgentClient(config.socket_path)
    await client.wait_ready(5)
    yield client
    await client.close()
    task.cancel()
    await app.close()


async def test_refusals_reach_the_client_as_permission_denied(agent: AgentClient, tree: Tree) -> None:
    with pytest.raises(PermissionDenied, match="through a symlink"):
        await agent.read_file("escape-file")
    with pytest.raises(PermissionDenied, match="through a symlink"):
        await agent.write_file("escape/new.txt", b"owned")
    with pytest.raises(PermissionDenied, match=r"'\.\.' traversal"):
        await agent.list_dir("../outside")
    assert tree.outside_listing() == {"secret.txt": SECRET}
    assert await agent.write_file("ok.txt", b"fine") == 4
    assert await agent.read_file("ok.txt") == b"fine"
