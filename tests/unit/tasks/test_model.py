"""Task files: loading, refusing what cannot run (naming it), dumping, digests, fixtures."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from sandbox.errors import InvalidArgument
from sandbox.models import SandboxKind
from sandbox.tasks import Fixtures, Task, TaskError

TASKS_DIR = Path(__file__).resolve().parents[3] / "tasks"

OSWORLD_TASK: dict[str, Any] = {
    "id": "94d95f96-9699-4208-98ba-3c3119edf9c2",
    "snapshot": "chrome",
    "instruction": "Open the downloaded notes in the text editor.",
    "source": "https://example.org/forum/thread",
    "config": [
        {
            "type": "download",
            "parameters": {"files": [{"url": "https://x.test/notes.txt", "path": "/home/user/n.txt"}]},
        },
        {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
        {"type": "execute", "parameters": {"command": "echo {CLIENT_PASSWORD} | sudo -S true", "shell": True}},
    ],
    "trajectory": "trajectories/",
    "related_apps": ["chrome", "os"],
    "evaluator": {
        "func": ["check_include_exclude", "exact_match"],
        "result": [
            {"type": "vm_command_line", "command": "cat /home/user/n.txt"},
            {"type": "active_url_from_accessTree"},
        ],
        "expected": [
            {"type": "rule", "rules": {"include": ["a"], "exclude": []}},
            {"type": "rule", "rules": {"expected": "https://x.test/"}},
        ],
        "conj": "or",
    },
    "proxy": False,
    "possibility_of_env_change": "low",
}


def test_an_osworld_task_loads_keeps_its_unknown_keys_and_dumps_as_it_was() -> None:
    task = Task.from_dict(copy.deepcopy(OSWORLD_TASK))
    assert task.sandbox.kind is SandboxKind.DESKTOP  # no "sandbox": OSWorld's tasks run in a desktop, chrome ones too
    assert task.snapshot == "chrome" and task.extra["related_apps"] == ["chrome", "os"]
    assert task.evaluator.conj == "or" and task.evaluator.funcs == ["check_include_exclude", "exact_match"]
    assert task.limits.max_steps == 15 and task.limits.max_seconds == 600
    assert task.to_dict() == OSWORLD_TASK
    assert Task.from_dict(task.to_dict()) == task
    assert Task.from_json(task.to_json()) == task


def test_an_explicit_sandbox_and_limits_are_kept() -> None:
    data = {**OSWORLD_TASK, "sandbox": {"kind": "browser", "screen": {"width": 1024, "height": 768}}}
    data["limits"] = {"max_steps": 30, "max_seconds": 120}
    task = Task.from_dict(data)
    assert task.sandbox.kind is SandboxKind.BROWSER and task.sandbox.screen is not None
    assert task.sandbox.screen.width == 1024 and task.limits.max_steps == 30
    dumped = task.to_dict()
    assert dumped["sandbox"] == {"kind": "browser", "screen": {"width": 1024, "height": 768}}
    assert Task.from_dict(dumped) == task


@pytest.mark.parametrize("path", sorted(TASKS_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_every_sample_task_loads_and_round_trips(path: Path) -> None:
    task = Task.from_file(path)
    assert task.problems() == [] and task.warnings() == []
    assert task.to_dict() == json.loads(path.read_text())
    assert Task.from_dict(task.to_dict()) == task


def test_problems_name_every_unsupported_type_and_function() -> None:
    data = copy.deepcopy(OSWORLD_TASK)
    data["config"] += [
        {"type": "googledrive", "parameters": {"settings_file": "x"}},
        {"type": "login", "parameters": {}},
        {"type": "download", "parameters": {"files": [], "extra": 1}},
    ]
    data["evaluator"] = {
        "func": ["compare_pptx_files", "exact_match", "check_include_exclude"],
        "result": [{"type": "vm_file", "path": "/a"}, {"type": "accessibility_tree"}, {"type": "vm_terminal_output"}],
        "expected": [{"type": "cloud_file", "path": "https://x.test/b"}, {"type": "rule", "rules": {}}, None],
        "postconfig": [{"type": "execute_python", "parameters": {"command": "x"}}],
    }
    with pytest.raises(TaskError) as caught:
        Task.from_dict(data)
    error = caught.value
    assert isinstance(error, InvalidArgument)
    for name in ("googledrive", "login", "compare_pptx_files", "accessibility_tree", "vm_terminal_output"):
        assert name in error.message
    assert any("execute_python" in p and "evaluator.postconfig[0]" in p for p in error.problems)
    assert "config[5] (download): unknown parameter 'extra'" in error.problems
    assert len(error.problems) == 7


def test_problems_name_steps_the_kind_cannot_do_and_lists_that_do_not_pair() -> None:
    data = {
        "id": "t",
        "instruction": "-",
        "sandbox": {"kind": "terminal"},
        "config": [
            {"type": "open", "parameters": {"path": "/tmp/a"}},
            {"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["about:blank"]}},
            {"type": "sleep", "parameters": {}},
        ],
        "evaluator": {
            "func": ["exact_match", "exact_match"],
            "result": [{"type": "active_url_from_accessTree"}],
            "expected": {"type": "rule", "rules": {"expected": 1}},
        },
    }
    clip = {**data, "config": [], "evaluator": {"func": "is_in_vm_clickboard", "expected": {"type": "clipboard"}}}
    assert Task.model_validate(clip).problems() == [
        "evaluator.expected: getter 'clipboard' needs a display, which a terminal sandbox has not"
    ]
    problems = Task.model_validate(data).problems()
    assert problems == [
        "config[0] (open): needs a display, which a terminal sandbox has not",
        "config[1] (chrome_open_tabs): needs a browser, which a terminal sandbox has not",
        "config[2] (sleep): missing parameter 'seconds'",
        "evaluator: func lists 2 functions but result has 1 items; they pair up one to one",
        "evaluator: func lists 2 functions but expected has a single value; they pair up one to one",
        "evaluator.result[0]: getter 'active_url_from_accessTree' needs a browser, which a terminal sandbox has not",
    ]
    android = {**data, "sandbox": {"kind": "android"}, "config": [], "evaluator": {"func": "infeasible"}}
    assert Task.model_validate(android).problems() == []  # android runs tasks: tests/unit/android/test_tasks.py


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "a task is a JSON object"),
        ('{"id": "x", "instruction": "-"}', r"evaluator: Field required"),
        ('{"id": "x", "instruction": "-", "evaluator": {"func": []}}', "func"),
        ('{"id": "x", "instruction": "-", "evaluator": {"func": "exact_match", "conj": "xor"}}', "conj"),
        (
            '{"id": "x", "instruction": "-", "evaluator": {"func": "infeasible"}, "limits": {"max_steps": 0}}',
            "max_steps",
        ),
    ],
)
def test_malformed_tasks_are_refused_with_where(text: str, match: str) -> None:
    with pytest.raises(TaskError, match=match):
        Task.from_json(text)


def test_from_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="cannot read the task file"):
        Task.from_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"id": "x", "instruction": "-", "evaluator": {"func": "nope"}}')
    with pytest.raises(TaskError, match=rf"{bad}.*unsupported function 'nope'"):
        Task.from_file(bad)


def test_osworld_empty_getters_mean_none() -> None:
    task = Task.from_dict(
        {"id": "x", "instruction": "-", "evaluator": {"func": "infeasible", "result": {}, "expected": {}}}
    )
    assert task.evaluator.result is None and task.evaluator.expected is None and task.infeasible


# ------------------------------------------------------------------ digest, fixtures


def _fixture_tree(tmp_path: Path, content: bytes = b"v1") -> Path:
    (tmp_path / "fixtures" / "x.test").mkdir(parents=True)
    (tmp_path / "fixtures" / "x.test" / "notes.txt").write_bytes(content)
    (tmp_path / "fixtures" / "by-id").mkdir()
    (tmp_path / "fixtures" / "by-id" / "doc").write_bytes(b"mapped")
    (tmp_path / "fixtures" / "fixtures.json").write_text(json.dumps({"https://drive.test/uc?id=7": "by-id/doc"}))
    return tmp_path


def test_fixtures_resolve_by_map_then_mirror_and_name_missing_urls(tmp_path: Path) -> None:
    fixtures = Fixtures.load(_fixture_tree(tmp_path))
    assert fixtures.resolve("https://x.test/notes.txt") == b"v1"
    assert fixtures.resolve("https://drive.test/uc?id=7") == b"mapped"
    assert fixtures.get("https://drive.test/uc?id=8") is None  # a query never mirrors: it needs the map
    for url in ("https://x.test/other.txt", "https://x.test/../fixtures.json", "https://x.test/", "ftp:nothing"):
        with pytest.raises(TaskError, match=f"no fixture for the URL {url}"):
            fixtures.resolve(url)
    assert Fixtures().get("https://x.test/notes.txt") is None
    (tmp_path / "fixtures" / "fixtures.json").write_text("[1]")
    with pytest.raises(TaskError, match="URL -> path"):
        Fixtures.load(tmp_path)


def test_warnings_name_urls_without_fixtures(tmp_path: Path) -> None:
    fixtures = Fixtures.load(_fixture_tree(tmp_path))
    data = copy.deepcopy(OSWORLD_TASK)
    data["evaluator"] = {"func": "exact_match", "result": {"type": "cloud_file", "path": "https://x.test/gone.txt"}}
    task = Task.from_dict(data, fixtures=fixtures)
    assert task.download_urls() == ["https://x.test/notes.txt", "https://x.test/gone.txt"]
    assert task.warnings() == ["URL https://x.test/gone.txt has no fixture"]
    assert Task.from_dict(data).warnings() == [
        "URL https://x.test/notes.txt has no fixture (no fixtures given)",
        "URL https://x.test/gone.txt has no fixture (no fixtures given)",
    ]


def test_digest_is_stable_and_covers_target_config_and_fixture_content(tmp_path: Path) -> None:
    fixtures = Fixtures.load(_fixture_tree(tmp_path))
    task = Task.from_dict(copy.deepcopy(OSWORLD_TASK), fixtures=fixtures)
    digest = task.digest()
    assert len(digest) == 64 and digest == Task.from_dict(copy.deepcopy(OSWORLD_TASK), fixtures=fixtures).digest()
    assert digest == task.digest(fixtures)

    same_state = copy.deepcopy(OSWORLD_TASK) | {"instruction": "Another wording", "limits": {"max_steps": 3}}
    same_state["evaluator"] = {"func": "infeasible"}
    assert Task.from_dict(same_state, fixtures=fixtures).digest() == digest

    other_config = copy.deepcopy(OSWORLD_TASK)
    other_config["config"][2]["parameters"]["command"] = "true"
    assert Task.from_dict(other_config, fixtures=fixtures).digest() != digest
    other_kind = copy.deepcopy(OSWORLD_TASK) | {"sandbox": {"kind": "browser"}}
    assert Task.from_dict(other_kind, fixtures=fixtures).digest() != digest
    assert task.digest(Fixtures()) != digest  # the fixture's content is part of it

    (tmp_path / "fixtures" / "x.test" / "notes.txt").write_bytes(b"v2")
    assert task.digest() != digest
