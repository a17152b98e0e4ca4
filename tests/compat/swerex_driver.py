"""Plays one sequence of SWE-ReX actions through SWE-ReX's own ``LocalRuntime`` (on this machine, in a temporary
folder) and through ``sandbox.compat.swerex`` (a terminal sandbox of the control plane at ``--target``), and writes
what each step observed, or raised, as JSON for tests/compat/test_swerex_side_by_side.py to compare.

Runs in .venv-swerex (scripts/venv_swerex.sh): ``python tests/compat/swerex_driver.py --target HOST:PORT --out F``.
Both runtimes work in folders of the same paths (``WORK`` under /tmp, a root of the platform's file API, and
``OUTSIDE`` under /var/tmp, outside it), so paths need no rewriting; each step names how its output is compared.
Each step runs in an event loop of its own, as SWE-agent calls its runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from swerex.deployment.local import LocalDeployment
from swerex.runtime.abstract import (
    AbstractRuntime,
    BashAction,
    BashInterruptAction,
    CloseBashSessionRequest,
    Command,
    CreateBashSessionRequest,
    ReadFileRequest,
    UploadRequest,
    WriteFileRequest,
)

from sandbox.compat.swerex import SandboxDeployment

NAME = f"swerex-side-{secrets.token_hex(4)}"
WORK = f"/tmp/{NAME}"
OUTSIDE = f"/var/tmp/{NAME}"
STARTUP_S = 10.0


@dataclass
class Step:
    name: str
    run: Callable[[AbstractRuntime, Path], Awaitable[Any]]
    compare: str = "exact"
    """``exact``: the whole observation; ``kind``: the exception's type, or the observation's fields but ``output``
    (a loop's ticks before an interrupt are a matter of timing); ``last``: the fields and the output's last line
    (SWE-ReX's own interrupt sends Ctrl-C again when the prompt is not back within 0.2 s, which on a busy machine it
    often is not: readline then echoes ``^C`` and prompts again, and a part of that is in the interrupt's output and
    the rest in the next command's, by timing: three local runs gave ``C\n``, ``^C\nHELLPS1PREFIX`` and nothing);
    ``type``: only what was returned or raised."""


def create(session: str) -> Callable[[AbstractRuntime, Path], Awaitable[Any]]:
    # SWE-ReX's default startup_timeout is 1 s, which a busy machine misses now and then (either runtime).
    return lambda rt, _: rt.create_session(CreateBashSessionRequest(session=session, startup_timeout=STARTUP_S))


def bash(command: str, **kwargs: Any) -> Callable[[AbstractRuntime, Path], Awaitable[Any]]:
    return lambda rt, _: rt.run_in_session(BashAction(command=command, **kwargs))


def execute(command: str | list[str], **kwargs: Any) -> Callable[[AbstractRuntime, Path], Awaitable[Any]]:
    return lambda rt, _: rt.execute(Command(command=command, **kwargs))


def read(path: str, **kwargs: Any) -> Callable[[AbstractRuntime, Path], Awaitable[Any]]:
    return lambda rt, _: rt.read_file(ReadFileRequest(path=path, **kwargs))


def write(path: str, content: str) -> Callable[[AbstractRuntime, Path], Awaitable[Any]]:
    return lambda rt, _: rt.write_file(WriteFileRequest(path=path, content=content))


def upload(source: str, target: str) -> Callable[[AbstractRuntime, Path], Awaitable[Any]]:
    return lambda rt, local: rt.upload(UploadRequest(source_path=str(local / source), target_path=target))


def make_sources(local: Path) -> None:
    """The files uploaded (the same bytes for both runtimes): a binary blob of every byte value, a tree."""
    rng = random.Random(33)
    blob = bytes(range(256)) * 64 + rng.randbytes(300_000)
    (local / "blob.bin").write_bytes(blob)
    tree = local / "tree"
    (tree / "pkg" / "sub").mkdir(parents=True)
    (tree / "empty").mkdir()
    (tree / "README.md").write_text("# a repo\nwith ünïcödé\r\nand CRLF\n")
    (tree / "pkg" / "data.bin").write_bytes(rng.randbytes(70_000))
    run = tree / "pkg" / "sub" / "run.sh"
    run.write_text("#!/bin/sh\necho ran\n")
    run.chmod(0o755)
    (tree / "pkg" / "link").symlink_to("sub/run.sh")


TREE_DIGEST = (
    "cd {path} && find . | LC_ALL=C sort && find . -type f | LC_ALL=C sort | xargs sha256sum "
    "&& stat -c '%n %a' pkg/sub/run.sh && readlink pkg/link && ./pkg/link"
)


def steps() -> list[Step]:
    long_line = "python3 -c \"print('a' * 200000)\""
    return [
        Step("create default session", create("default"), "type"),
        Step("create it again", create("default")),
        Step("cd to the work folder", bash(f"mkdir -p {WORK} && cd {WORK} && pwd")),
        Step("stdout and stderr", bash("echo hello; echo oops >&2")),
        Step("several lines", bash("x=41; echo $((x + 1))\necho second\n\necho third")),
        Step("a here-document", bash("cat <<'EOF' > notes.txt\nline one\n  line two\nEOF\ncat notes.txt")),
        Step("a continued line", bash("echo one \\\n  two")),
        Step("variables persist", bash("export FOO=bar; cd sub 2>/dev/null || mkdir sub")),
        Step("...and are seen", bash("echo $FOO; basename $(pwd)")),
        Step("no trailing newline", bash("printf 'no newline'")),
        Step("colours and tabs", bash("printf '\\033[31mred\\033[0m\\tafter\\n'")),
        Step("unicode", bash("echo 'ünïcödé ✓'")),
        Step("long output (50000 lines)", bash("seq 1 50000")),
        Step("a 200 kB line", bash(long_line)),
        Step("non-zero exit, check silent", bash("ls /no/such/path", check="silent")),
        Step("non-zero exit, check raise", bash("ls /no/such/path")),
        Step("non-zero exit, check raise with error_msg", bash("false", error_msg="it failed")),
        Step("non-zero exit, check ignore", bash("false", check="ignore")),
        Step("exit code of a pipeline", bash("false | true; echo ${PIPESTATUS[0]}", check="silent")),
        Step("a syntax error", bash("echo 'unterminated")),
        Step("a syntax error (missing done)", bash("for i in 1 2; do echo $i")),
        Step("a command that times out", bash("sleep 30", timeout=1)),
        Step("interrupt it", lambda rt, _: rt.run_in_session(BashInterruptAction()), "kind"),
        Step("the session works after", bash("echo after; pwd"), "last"),
        Step("a chatty loop times out", bash("while true; do echo tick; sleep 0.1; done", timeout=1)),
        Step("interrupt the loop", lambda rt, _: rt.run_in_session(BashInterruptAction()), "kind"),
        Step("the session works again", bash("echo again"), "last"),
        Step("an interactive program", bash("python3 -q", is_interactive_command=True, expect=[">>> "], timeout=10)),
        Step("a line to it", bash("print(6 * 7)", is_interactive_command=True, expect=[">>> "], timeout=10)),
        Step("a timeout in it", bash("import time; time.sleep(3)", is_interactive_command=True, timeout=1)),
        Step("quit it", bash("exit()", is_interactive_quit=True, timeout=10)),
        Step("back in bash", bash("echo back in bash")),
        Step("a session that does not exist", bash("echo hi", session="nope")),
        Step("close one that does not exist", lambda rt, _: rt.close_session(CloseBashSessionRequest(session="nope"))),
        Step("second session", create("two"), "type"),
        Step("...has its own cwd", bash(f"cd {WORK}/sub && pwd; echo ${{FOO:-unset}}", session="two")),
        Step("close it", lambda rt, _: rt.close_session(CloseBashSessionRequest(session="two"))),
        Step("run in the closed one", bash("echo hi", session="two")),
        Step("execute a list", execute(["echo", "hi", "there"])),
        Step("execute a shell string", execute("echo $((6 * 7)); echo err >&2; exit 3", shell=True)),
        Step("execute merged streams", execute("echo out; echo err >&2", shell=True, merge_output_streams=True)),
        Step("execute with env", execute("echo ${FOO:-none} ${HOME:-nohome}", shell=True, env={"FOO": "x"})),
        Step("execute in cwd", execute(["pwd"], cwd=WORK)),
        Step("execute check", execute(["false"], check=True)),
        Step("execute timeout", execute(["sleep", "5"], timeout=0.5)),
        Step("execute a missing program", execute(["no-such-program-33"])),
        Step("execute a string without shell", execute("echo hi")),
        Step("execute in a missing cwd", execute(["pwd"], cwd=f"{WORK}/nowhere")),
        Step("write a file (new folders)", write(f"{WORK}/a/b/c.txt", "one\r\ntwo ✓\rthree\n")),
        Step("read it back", lambda rt, _: rt.read_file(ReadFileRequest(path=f"{WORK}/a/b/c.txt"))),
        Step("read a missing file", lambda rt, _: rt.read_file(ReadFileRequest(path=f"{WORK}/missing.txt"))),
        Step("read a folder", lambda rt, _: rt.read_file(ReadFileRequest(path=f"{WORK}/a"))),
        Step("write over a folder", lambda rt, _: rt.write_file(WriteFileRequest(path=f"{WORK}/a", content="x"))),
        Step("read binary as utf-8", lambda rt, _: rt.read_file(ReadFileRequest(path=f"{WORK}/blob.bin"))),
        Step("upload a binary file", upload("blob.bin", f"{WORK}/blob.bin")),
        Step("read binary as utf-8", lambda rt, _: rt.read_file(ReadFileRequest(path=f"{WORK}/blob.bin"))),
        Step("read binary, errors=replace", read(f"{WORK}/blob.bin", errors="replace")),
        Step("read binary as latin-1", read(f"{WORK}/blob.bin", encoding="latin-1")),
        Step("its checksum", bash(f"sha256sum {WORK}/blob.bin && stat -c %s {WORK}/blob.bin")),
        Step("upload into a folder", upload("blob.bin", f"{WORK}/a")),
        Step("...lands in it", bash(f"ls {WORK}/a")),
        Step("upload a tree", upload("tree", f"{WORK}/tree")),
        Step("the tree", bash(TREE_DIGEST.format(path=f"{WORK}/tree"), check="silent")),
        Step("upload a tree where one is", upload("tree", f"{WORK}/tree")),
        Step("upload a missing file", upload("missing.bin", f"{WORK}/x")),
        Step("outside the file roots", execute(["mkdir", "-p", OUTSIDE])),
        Step("write there", lambda rt, _: rt.write_file(WriteFileRequest(path=f"{OUTSIDE}/d/x.txt", content="out ✓"))),
        Step("read there", lambda rt, _: rt.read_file(ReadFileRequest(path=f"{OUTSIDE}/d/x.txt"))),
        Step("read a missing file there", lambda rt, _: rt.read_file(ReadFileRequest(path=f"{OUTSIDE}/none"))),
        Step("upload a tree there", upload("tree", f"{OUTSIDE}/tree")),
        Step("that tree", bash(TREE_DIGEST.format(path=f"{OUTSIDE}/tree"), check="silent")),
        Step("exit the shell", bash("exit 3")),
        Step("is alive", lambda rt, _: rt.is_alive()),
        Step("close the runtime", lambda rt, _: rt.close()),
    ]


def record(value: Any) -> dict[str, Any]:
    if isinstance(value, BaseModel):
        return {"type": type(value).__name__, "value": value.model_dump()}
    return {"type": type(value).__name__, "value": value}


def play(runtime: AbstractRuntime, local: Path) -> list[dict[str, Any]]:
    """Every step in an event loop of its own, as SWE-agent calls its runtime (``asyncio.run`` each time)."""
    trace = []
    for step in steps():
        started = time.monotonic()
        try:
            outcome = record(asyncio.run(step.run(runtime, local)))
        except Exception as e:
            outcome = {"raised": f"{type(e).__module__}.{type(e).__qualname__}", "message": str(e)[:300]}
        outcome.update(step=step.name, compare=step.compare, seconds=round(time.monotonic() - started, 3))
        trace.append(outcome)
    return trace


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="swerex-sources-") as sources:
        local = Path(sources)
        make_sources(local)
        digest = hashlib.sha256((local / "blob.bin").read_bytes()).hexdigest()
        here = LocalDeployment()
        asyncio.run(here.start())
        try:
            local_trace = play(here.runtime, local)
        finally:
            asyncio.run(here.stop())
            for path in (WORK, OUTSIDE):
                shutil.rmtree(path, ignore_errors=True)
        there = SandboxDeployment(target=args.target, spec={"network": "none"})
        asyncio.run(there.start())
        try:
            sandbox_id = there.sandbox.id
            box_trace = play(there.runtime, local)
        finally:
            asyncio.run(there.stop())
    report = {"local": local_trace, "sandbox": box_trace, "sandbox_id": sandbox_id, "blob_sha256": digest}
    Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    os.chdir("/")
    sys.exit(main())
