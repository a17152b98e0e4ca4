"""Evaluation: OSWorld's conj semantics, infeasible tasks, postconfig, and the getters over a fake runtime."""

from __future__ import annotations

import contextlib
import json
import shlex
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sandbox.models import ExecResult, SandboxKind
from sandbox.tasks import Fixtures, Task, TaskError, evaluate, osworld
from sandbox.tasks.getters import get
from sandbox.tasks.runtime import EvalContext
from sandbox.tasks.values import FileData
from tests.unit.tasks.test_setup import FakeRuntime, ok


def rule(**rules: Any) -> dict[str, Any]:
    return {"type": "rule", "rules": rules}


def echo(value: str) -> dict[str, Any]:
    return {"type": "vm_command_line", "command": ["echo", value]}


def make(evaluator: dict[str, Any], kind: str = "terminal", **extra: Any) -> Task:
    return Task.from_dict({"id": "t", "instruction": "-", "sandbox": {"kind": kind}, "evaluator": evaluator, **extra})


def echoing(cmd: str | list[str]) -> ExecResult | None:
    return ok(cmd[1]) if isinstance(cmd, list) and cmd[0] == "echo" else None


def three(conj: str, outputs: list[str]) -> Task:
    return make(
        {
            "func": ["exact_match"] * 3,
            "result": [echo(o) for o in outputs],
            "expected": [rule(expected="yes")] * 3,
            "conj": conj,
        }
    )


async def test_and_stops_at_the_first_zero_and_averages_otherwise() -> None:
    rt = FakeRuntime(handler=echoing)
    result = await evaluate(three("and", ["yes", "no", "yes"]), rt, Fixtures())
    assert result.reward == 0.0
    assert [d.score for d in result.details] == [1.0, 0.0, None]
    assert [e["cmd"] for e in rt.execs] == [["echo", "yes"], ["echo", "no"]]  # the third getter never ran
    assert result.details[2].error == "not evaluated: exact_match scored 0 (conj and)"
    assert (await evaluate(three("and", ["yes"] * 3), rt, Fixtures())).reward == 1.0


async def test_and_averages_partial_scores_and_or_takes_the_best() -> None:
    task = make(
        {
            "func": ["fuzzy_match", "exact_match"],
            "result": [echo("abcd"), echo("yes")],
            "expected": [rule(expected="abce"), rule(expected="yes")],
        }
    )
    assert (await evaluate(task, FakeRuntime(handler=echoing), Fixtures())).reward == pytest.approx((0.75 + 1) / 2)
    rt = FakeRuntime(handler=echoing)
    result = await evaluate(three("or", ["no", "yes", "no"]), rt, Fixtures())
    assert result.reward == 1.0 and [d.score for d in result.details] == [0.0, 1.0, None]
    assert (await evaluate(three("or", ["no"] * 3), rt, Fixtures())).reward == 0.0
    partial = make(
        {"func": ["fuzzy_match", "fuzzy_match"], "result": [echo("abcd"), echo("ab")],
         "expected": [rule(expected="abce"), rule(expected="abce")], "conj": "or"}
    )  # fmt: skip
    assert (await evaluate(partial, rt, Fixtures())).reward == pytest.approx(0.75)


async def test_infeasible_scores_one_only_on_fail_and_fail_zeroes_a_feasible_task() -> None:
    rt = FakeRuntime(handler=echoing)
    infeasible = make({"func": "infeasible"})
    assert (await evaluate(infeasible, rt, Fixtures(), last_action="FAIL")).reward == 1.0
    for last in (None, "DONE", "WAIT"):
        assert (await evaluate(infeasible, rt, Fixtures(), last_action=last)).reward == 0.0
    feasible = make({"func": "exact_match", "result": echo("yes"), "expected": rule(expected="yes")})
    assert (await evaluate(feasible, rt, Fixtures(), last_action="DONE")).reward == 1.0
    failed = await evaluate(feasible, rt, Fixtures(), last_action="FAIL")
    assert failed.reward == 0.0 and "FAIL" in failed.reason


async def test_postconfig_runs_first_and_a_metric_error_scores_zero() -> None:
    rt = FakeRuntime(handler=echoing)
    task = make(
        {
            "func": "check_json",
            "result": {"type": "vm_file", "path": "/workspace/c.json"},
            "expected": rule(expect=[{"key": ["a"], "method": "eq", "ref": 1}]),
            "postconfig": [{"type": "execute", "parameters": {"command": "sync"}}],
        }
    )
    rt.files["/workspace/c.json"] = b"{broken"
    result = await evaluate(task, rt, Fixtures())
    assert rt.execs[0]["cmd"] == ["sync"]
    assert result.reward == 0.0 and result.details[0].error is not None and "JSONDecodeError" in result.details[0].error
    rt.files["/workspace/c.json"] = b'{"a": 1}'
    result = await evaluate(task, rt, Fixtures())
    assert result.reward == 1.0 and result.details[0].result == {
        "file": "/workspace/c.json",
        "bytes": 8,
        "head": '{"a": 1}',
    }


async def test_a_task_that_cannot_run_is_not_evaluated() -> None:
    task = Task.model_validate({"id": "t", "instruction": "-", "evaluator": {"func": "compare_pptx_files"}})
    with pytest.raises(TaskError, match="compare_pptx_files"):
        await evaluate(task, FakeRuntime(), Fixtures())


# ------------------------------------------------------------------ getters


def ctx(rt: FakeRuntime, fixtures: Fixtures | None = None) -> EvalContext:
    return EvalContext(rt, fixtures or Fixtures())


async def test_file_getters(tmp_path: Path) -> None:
    rt = FakeRuntime()
    rt.files["/workspace/a.txt"] = b"A"
    c = ctx(rt)
    assert await get(c, "vm_file", {"path": "/workspace/a.txt", "dest": "a.txt"}) == FileData("/workspace/a.txt", b"A")
    assert await get(c, "vm_file", {"path": "/workspace/none.txt"}) is None
    multi = {"path": ["/workspace/a.txt", "/workspace/none.txt", "/workspace/a.txt"], "multi": True, "gives": [0, 1]}
    assert await get(c, "vm_file", multi) == [FileData("/workspace/a.txt", b"A"), None]
    # outside the file API's roots: copied to /tmp with exec, then read
    rt.handler = lambda cmd: ok(code=3) if "missing" in str(cmd) else None
    assert await get(c, "vm_file", {"path": "/home/user/missing.txt"}) is None
    (tmp_path / "fixtures" / "x.test").mkdir(parents=True)
    (tmp_path / "fixtures" / "x.test" / "gold.txt").write_bytes(b"gold")
    c = ctx(rt, Fixtures.load(tmp_path))
    assert await get(c, "cloud_file", {"path": "https://x.test/gold.txt"}) == FileData(
        "https://x.test/gold.txt", b"gold"
    )
    with pytest.raises(TaskError, match=r"no fixture for the URL https://x\.test/other\.txt"):
        await get(c, "cloud_file", {"path": "https://x.test/other.txt"})
    rt.files[f"{osworld.CACHE_DIR}/out.txt"] = b"cached"
    assert await get(c, "cache_file", {"path": "out.txt"}) == FileData(f"{osworld.CACHE_DIR}/out.txt", b"cached")


async def test_command_getters_and_list_directory() -> None:
    tree = {"type": "directory", "name": "p", "children": [{"type": "file", "name": "a.jpg"}]}

    def answer(cmd: str | list[str]) -> ExecResult | None:
        if isinstance(cmd, list) and cmd[:2] == ["python3", "-c"]:
            assert cmd[-1] == "/home/sandbox/p"
            return ok(json.dumps(tree))
        return ok("out", "err")

    c = ctx(FakeRuntime(handler=answer))
    assert await get(c, "vm_command_line", {"command": "ls", "shell": True}) == "out"
    assert await get(c, "vm_command_error", {"command": ["ls"]}) == "err"
    assert await get(c, "list_directory", {"path": "/home/user/p"}) == tree
    assert await get(c, "rule", {"rules": {"expected": 1}}) == {"expected": 1}
    assert await get(c, "vm_screen_size", {}) == {"width": 1920, "height": 1080}
    c = ctx(FakeRuntime(handler=lambda cmd: ok('"Order number: A-4711\\n"')))
    assert await get(c, "clipboard", {}) == "Order number: A-4711\n"
    assert c.runtime.execs[-1]["cmd"][-1] == "CLIPBOARD"  # type: ignore[attr-defined]
    with pytest.raises(TaskError, match="selection must be"):
        await get(c, "clipboard", {"selection": "NOPE"})
    with pytest.raises(TaskError, match="unsupported getter type 'accessibility_tree'"):
        await get(c, "accessibility_tree", {})


async def test_browser_getters() -> None:
    rt = FakeRuntime(kind=SandboxKind.BROWSER)
    rt.url = "file:///w/welcome.html?name=Ada+Lovelace&email=ada%40example.com"
    rt.tabs = [{"id": "1", "url": rt.url, "title": "Welcome"}, {"id": "2", "url": "about:blank", "title": ""}]
    rt.js = {"localStorage.getItem('theme')": "dark"}
    c = ctx(rt)
    assert await get(c, "active_url_from_accessTree", {"goto_prefix": "https://"}) == rt.url
    parsed = await get(c, "active_tab_url_parse", {"parse_keys": ["name", "email", "x"], "replace": {"email": "mail"}})
    assert parsed == {"name": "Ada Lovelace", "mail": "ada@example.com", "x": ""}
    assert await get(c, "open_tabs_info", {}) == [
        {"title": "Welcome", "url": rt.url},
        {"title": "", "url": "about:blank"},
    ]
    assert await get(c, "browser_evaluate", {"expression": "localStorage.getItem('theme')"}) == "dark"
    info = await get(c, "active_tab_info", {})
    assert info["url"] == rt.url and info["title"] == "T"


async def test_chrome_profile_getters(tmp_path: Path) -> None:
    rt = FakeRuntime(kind=SandboxKind.BROWSER)
    profile = "/home/sandbox/.config/chromium"
    history = tmp_path / "History"
    with contextlib.closing(sqlite3.connect(history)) as db:
        db.execute("CREATE TABLE urls (url TEXT, title TEXT, last_visit_time INTEGER)")
        db.execute("INSERT INTO urls VALUES ('https://x.test/', 'X', 13300000000000000)")
        db.commit()
    blobs = {
        f"{profile}/Default/History": history.read_bytes(),
        f"{profile}/Default/Bookmarks": json.dumps({"roots": {"bookmark_bar": {"children": []}}}).encode(),
        f"{profile}/Default/Preferences": json.dumps(
            {"profile": {"name": "Work"}, "default_search_provider_data": {"template_url_data": {"short_name": "Duck"}}}
        ).encode(),
        f"{profile}/Local State": json.dumps(
            {"intl": {"app_locale": "de"}, "browser": {"enabled_labs_experiments": ["a@1"]}}
        ).encode(),
    }

    def copy(cmd: str | list[str]) -> ExecResult | None:  # the "cp -- SRC DEST" of a path outside the roots
        if isinstance(cmd, str) and " cp -- " in cmd:
            src, dest = shlex.split(cmd.split(" cp -- ")[1])
            if src not in blobs:
                return ok(code=3)
            rt.files[dest] = blobs[src]
        return None

    rt.handler = copy
    c = ctx(rt)
    assert await get(c, "history", {"dest": "h"}) == [("https://x.test/", "X", 13300000000000000)]
    assert await get(c, "bookmarks", {}) == {"bookmark_bar": {"children": []}}
    assert await get(c, "profile_name", {}) == "Work"
    assert await get(c, "default_search_engine", {}) == "Duck"
    assert await get(c, "chrome_language", {}) == "de"
    assert await get(c, "enabled_experiments", {}) == ["a@1"]
    assert await get(c, "chrome_font_size", {}) == {
        "default_fixed_font_size": 13,
        "default_font_size": 16,
        "minimum_font_size": 13,
    }
    assert await get(c, "cookie_data", {}) is None
    blobs.clear()
    assert await get(c, "bookmarks", {}) == []
    assert await get(c, "default_search_engine", {}) == "Google"
