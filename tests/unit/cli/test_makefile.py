"""`make setup` puts the `sandbox` command on the PATH (scripts/link_cli.sh, run by scripts/setup.sh) without ever
replacing someone else's file, and `make run` says how to call it and keeps its live sandboxes until Ctrl-C.

The link step runs for real here, into a temporary directory named by SANDBOX_BIN_DIR."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "link_cli.sh"
TARGET = ROOT / ".venv" / "bin" / "sandbox"
BASE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

pytestmark = pytest.mark.skipif(not TARGET.exists(), reason="no .venv/bin/sandbox in this checkout")


def link(bin_dir: Path, *args: str, path: str = BASE_PATH, cwd: Path = ROOT) -> str:
    env = {**os.environ, "SANDBOX_BIN_DIR": str(bin_dir), "PATH": path}
    done = subprocess.run(["bash", str(SCRIPT), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_it_links_the_venvs_cli_and_says_so_then_finds_it_there(tmp_path: Path) -> None:
    said = link(tmp_path)
    made = tmp_path / "sandbox"
    assert made.is_symlink() and Path(os.readlink(made)) == TARGET
    assert made.resolve() == TARGET.resolve()
    assert f"linked {made} -> {TARGET}" in said
    assert "not on PATH" in said, "the directory is not on this PATH: it must say so"

    again = link(tmp_path, path=f"{tmp_path}:{BASE_PATH}")
    assert "(already)" in again and "note" not in again
    assert Path(os.readlink(made)) == TARGET


def test_it_never_replaces_a_file_or_a_link_of_someone_elses(tmp_path: Path) -> None:
    cases: dict[str, Path] = {}
    (tmp_path / "file").mkdir()
    (tmp_path / "file" / "sandbox").write_text("#!/bin/sh\necho policycoreutils\n")
    cases["file"] = tmp_path / "file"
    (tmp_path / "other-link").mkdir()
    (tmp_path / "other-link" / "sandbox").symlink_to("/usr/bin/true")
    cases["other-link"] = tmp_path / "other-link"
    (tmp_path / "dangling-other").mkdir()
    (tmp_path / "dangling-other" / "sandbox").symlink_to("/nowhere/bin/sandbox")
    cases["dangling-other"] = tmp_path / "dangling-other"
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "sandbox").mkdir()
    cases["dir"] = tmp_path / "dir"
    for name, bin_dir in cases.items():
        before = os.readlink(bin_dir / "sandbox") if (bin_dir / "sandbox").is_symlink() else None
        said = link(bin_dir)
        assert f"left {bin_dir / 'sandbox'} alone" in said, (name, said)
        assert str(TARGET) in said, "it says what to call instead"
        if before is not None:
            assert os.readlink(bin_dir / "sandbox") == before, name
    assert (cases["file"] / "sandbox").read_text() == "#!/bin/sh\necho policycoreutils\n"
    assert (cases["dir"] / "sandbox").is_dir()


def test_a_dangling_link_to_a_moved_checkouts_venv_is_replaced(tmp_path: Path) -> None:
    stale = tmp_path / "sandbox"
    stale.symlink_to("/gone/checkout/.venv/bin/sandbox")
    said = link(tmp_path)
    assert "replacing" in said and "linked" in said
    assert Path(os.readlink(stale)) == TARGET


def test_no_directory_is_said_and_is_not_an_error(tmp_path: Path) -> None:
    said = link(tmp_path / "missing")
    assert "no directory" in said and str(TARGET) in said
    assert not (tmp_path / "missing").exists()


def test_how_names_sandbox_when_the_path_finds_this_checkouts_else_the_venvs_path(tmp_path: Path) -> None:
    link(tmp_path)
    assert link(tmp_path, "--how", path=f"{tmp_path}:{BASE_PATH}").strip() == "sandbox"
    assert link(tmp_path, "--how").strip() == ".venv/bin/sandbox"
    assert link(tmp_path, "--how", cwd=tmp_path).strip() == str(TARGET)
    impostor = tmp_path / "other"
    impostor.mkdir()
    (impostor / "sandbox").symlink_to("/usr/bin/true")
    assert link(tmp_path, "--how", path=f"{impostor}:{tmp_path}:{BASE_PATH}").strip() == ".venv/bin/sandbox"


def test_setup_runs_the_link_step_and_run_says_how_to_call_the_cli_then_holds_the_live_sandboxes() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert 'bash "$ROOT/scripts/link_cli.sh"' in setup and "\nlink_cli\n" in setup
    dry = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert dry.returncode == 0, dry.stderr
    recipe = dry.stdout
    order = [
        recipe.index("sandbox demo "),
        recipe.index("scripts/link_cli.sh --how"),
        recipe.index("sandbox demo live --view"),
        recipe.rindex("wait $pid"),
    ]
    assert order == sorted(order), recipe
    # Ctrl-C reaches `demo live` (it deletes its sandboxes through the control plane) and not the control plane, in a
    # process group of its own; then the shell's trap stops it.
    assert "set -m; .venv/bin/sandbox server" in recipe and "& pid=$!; set +m;" in recipe
    assert "trap 'exit 130' INT TERM" in recipe
