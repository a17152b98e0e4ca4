"""Every code block a reader would paste from README.md and docs/*.md runs here, against a real control plane.

**Which blocks run.** Fenced blocks tagged ``bash``, ``sh``, ``shell`` or ``console`` (its ``$ `` lines) run in
``bash`` with ``set -euo pipefail``; blocks tagged ``python`` run in a fresh interpreter (this venv's). Blocks tagged
anything else are illustrations and never run: ``ILLUSTRATIONS`` lists each such tag and why it is not run (output
and messages, file formats, commands that need a Kubernetes cluster or the Android SDK). A block whose tag is in
neither list fails ``test_every_block_has_a_known_tag``: a new tag is decided on here, never silently ignored.

**Skipped on purpose.** A runnable block with a line in ``SKIPPED`` (``make run``, ``make test``, ``make bench``,
``make setup``, ``make push``, image builds, a second ``sandbox server``: they recurse into this suite, take many
minutes, change the images every other test uses, or serve until stopped) is reported as skipped with the line and
the reason (``pytest -ra`` shows them).

**The server.** One ``sandbox server`` (``sandbox.testing.server.ServerProcess``) for the module, with the default
settings (default capacity), on free loopback ports, under this run's owner (``test-<run id>-docs``) and socket root,
so its containers, and only them, carry the run's labels; each runs with network ``none`` (the blocks ask for no
other network, and ``test_block`` checks every container of the owner after each block). The blocks are written for
``make run``'s addresses, so a reader can paste them: before a block runs, ``127.0.0.1:50051`` / ``localhost:50051``
in its text are replaced by the test server's gRPC address and ``127.0.0.1:8080`` / ``localhost:8080`` by its HTTP
address. The address is substituted, rather than the server started on 50051 and 8080, because another control
plane (a ``make run``, a colleague's) may hold those ports on this machine. ``SANDBOX_TARGET`` names the gRPC address
too (the CLI reads it; ``sandbox.client.Client()`` does not, so Python blocks name the address).

**Where a block runs.** A fresh temporary directory, with ``tasks`` linked to the repository's ``tasks/`` (blocks are
written to run from the repository's root); ``PATH`` starts with ``.venv/bin`` (the docs say once "with .venv/bin on
your PATH"); no ``SANDBOX_TOKEN`` (the server has no tokens file, as with ``make run``).

**Self-contained.** Every runnable block runs alone in a fresh process: none uses a variable, a file or a sandbox an
earlier block made (no concatenation of blocks). Blocks delete what they create; whatever a failing block leaves
(containers, networks, snapshot images of the owner) is removed at the end by the owner's clean-up.

**Bounds.** Each block gets ``BLOCK_TIMEOUT_S`` (its process group is killed past it); the whole module takes about
two minutes on a 2-core machine.

Also: README.md is at most ``README_MAX_LINES`` lines and opens, after its title, with the two commands.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from sandbox.backends.base import LABEL_OWNER
from tests.conftest import OWNER, RUN_ID, owned_by, require_image
from tests.docker.servers import ServerProcess, started

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
VENV_BIN = Path(sys.executable).parent
DOCS_OWNER = f"{OWNER}-docs"
DOCS_SOCKET_ROOT = f"/run/sbx-test-{RUN_ID}-docs"
BLOCK_TIMEOUT_S = 120
README_MAX_LINES = 200
KINDS = ("terminal", "desktop", "browser", "terminal-jupyter")

RUNNABLE = {"bash", "sh", "shell", "console", "python"}
ILLUSTRATIONS = {
    "": "no tag: a diagram or a file tree",
    "text": "output, log lines, error messages, diagrams",
    "json": "a file's or a body's format (tasks, server.json, tokens files)",
    "yaml": "Helm values",
    "proto": "a message's format",
    "sh-cluster": "needs a Kubernetes cluster (helm, kubectl, k3s, kind, sudo on a node) or installs one; none can run"
    " here: tests/k8s checks the chart, the manifests and kubectl against a fake API server instead",
    "console-cluster": "a kubectl session against a cluster, with its output (as sh-cluster)",
    "sh-android": "needs the Android SDK's sdkmanager, an android image and /dev/kvm: none here (docs/android.md)",
}
MAKE_TARGETS = {
    "run": "starts a control plane and serves until Ctrl-C",
    "test": "runs this suite: it would recurse",
    "bench": "takes over half an hour",
    "setup": "installs Debian packages and builds images: `make test` ran it already",
    "images": "builds images (`make setup`)",
    "push": "pushes every image to a registry",
    "soak": "runs for minutes by design",
}
SKIPPED = [
    (re.compile(rf"^\s*make\s+(?:.*\s)?{target}\b"), f"make {target}: {why}") for target, why in MAKE_TARGETS.items()
] + [
    (
        re.compile(r"\bsandbox\s+images\s+(?:build|prune|push)\b"),
        "builds, prunes or pushes the images every other test uses (minutes when a recipe changed)",
    ),
    (
        re.compile(r"\bsandbox\s+server\b"),
        "starts another control plane (with the reader's files) that serves until stopped",
    ),
]
ADDRESSES = [
    (re.compile(r"\b(?:127\.0\.0\.1|localhost):50051\b"), "grpc"),
    (re.compile(r"\b(?:127\.0\.0\.1|localhost):8080\b"), "http"),
]
OPENING = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<tag>[^\s`]*)")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    tag: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def script(self) -> str:
        """What runs: the text, or a console block's ``$ `` commands (with their continuation lines)."""
        if self.tag != "console":
            return self.text
        commands: list[str] = []
        continued = False
        for line in self.text.splitlines():
            if continued or line.startswith("$ "):
                commands.append(line if continued else line[2:])
                continued = line.endswith("\\")
        return "\n".join(commands) + "\n"


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, dedented by their fence's indentation."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = OPENING.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            line = lines[j]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            j += 1
        assert j < len(lines), f"{path.relative_to(ROOT)}:{i + 1}: a code block is never closed"
        found.append(Block(path, i + 1, opening["tag"].lower(), "\n".join(body) + "\n"))
        i = j + 1
    return found


ALL_BLOCKS = [block for path in DOC_FILES for block in blocks_of(path)]
RUNNABLE_BLOCKS = [block for block in ALL_BLOCKS if block.tag in RUNNABLE]


def skip_reason(block: Block) -> str | None:
    for line in block.script().splitlines():
        for pattern, why in SKIPPED:
            if pattern.search(line):
                return f"{line.split('#')[0].strip()!r}: {why}"
    return None


def with_addresses(text: str, server: ServerProcess) -> str:
    """``make run``'s addresses in the text replaced by the test server's."""
    actual = {"grpc": server.grpc_target, "http": server.http_url.removeprefix("http://")}
    for pattern, which in ADDRESSES:
        text = pattern.sub(actual[which], text)
    return text


@pytest.fixture(scope="module")
def server(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    for kind in KINDS:
        require_image(docker_client, kind)
    workdir = tmp_path_factory.mktemp("docs-server")
    with (
        owned_by(docker_client, DOCS_OWNER, DOCS_SOCKET_ROOT),
        started(ServerProcess(workdir, owner=DOCS_OWNER, socket_root=DOCS_SOCKET_ROOT)) as process,
    ):
        yield process
    for image in docker_client.images.list(filters={"label": f"{LABEL_OWNER}={DOCS_OWNER}"}):
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(image.id, force=True)


def run(block: Block, server: ServerProcess, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The block in its own process group, killed whole past ``BLOCK_TIMEOUT_S``."""
    text = with_addresses(block.script(), server)
    if block.tag == "python":
        source = cwd / "block.py"
        argv = [sys.executable, str(source)]
    else:
        source = cwd / "block.sh"
        text = "set -euo pipefail\n" + text
        argv = ["bash", str(source)]
    source.write_text(text)
    env = {key: value for key, value in os.environ.items() if key != "SANDBOX_TOKEN"}
    env |= {"SANDBOX_TARGET": server.grpc_target, "PATH": f"{VENV_BIN}:{env.get('PATH', '')}", "COLUMNS": "160"}
    process = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{block.name} ran over {BLOCK_TIMEOUT_S} s\n{stdout[-3000:]}\n{stderr[-3000:]}", pytrace=False)
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


@pytest.mark.parametrize("block", RUNNABLE_BLOCKS, ids=[block.name for block in RUNNABLE_BLOCKS])
def test_block(block: Block, server: ServerProcess, docker_client: docker.DockerClient, tmp_path: Path) -> None:
    reason = skip_reason(block)
    if reason:
        pytest.skip(reason)
    (tmp_path / "tasks").symlink_to(ROOT / "tasks")
    result = run(block, server, tmp_path)
    assert result.returncode == 0, (
        f"{block.name} exited {result.returncode}\n--- block ---\n{block.text}--- stdout ---\n{result.stdout[-4000:]}"
        f"\n--- stderr ---\n{result.stderr[-4000:]}\n--- server log ---\n{server.log_tail(2000)}"
    )
    networks = {
        summary["Names"][0]: summary["HostConfig"]["NetworkMode"]
        for summary in docker_client.api.containers(all=True, filters={"label": f"{LABEL_OWNER}={DOCS_OWNER}"})
    }
    assert all(mode == "none" for mode in networks.values()), f"containers on a network: {networks}"


def test_every_block_has_a_known_tag() -> None:
    unknown = [
        f"{block.name} ({block.tag!r})" for block in ALL_BLOCKS if block.tag not in RUNNABLE | ILLUSTRATIONS.keys()
    ]
    assert not unknown, (
        f"tag these blocks as runnable ({sorted(RUNNABLE)}) or as one of {sorted(ILLUSTRATIONS)}: {unknown}"
    )


def test_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}"
    assert lines[0].startswith("# "), "README.md starts with its title"
    opening = [line for line in lines[1:6] if line.strip()][:4]
    assert len(opening) == 4, "README.md opens with the two commands in one bash block"
    fence, run_line, test_line, closing = opening
    assert fence == "```bash", "the two commands are one bash block, right after the title"
    assert re.match(r"make run +# \S", run_line), f"the first command is `make run` with its comment: {run_line!r}"
    assert re.match(r"make test +# \S", test_line), f"the second command is `make test` with its comment: {test_line!r}"
    assert closing == "```", "the block holds the two commands and nothing else"
