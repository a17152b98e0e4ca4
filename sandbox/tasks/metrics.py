"""Evaluator metrics: OSWorld's general (and os/vscode) ones, with its names, arguments and semantics, as pure
functions of what the getters returned. A metric is called ``metric(result, expected, **options)`` when the task
has an ``expected`` getter, else ``metric(result, **options)``, as OSWorld does; file arguments are
:class:`~sandbox.tasks.values.FileData` (None for a missing file, which scores 0). Each returns a float in [0, 1].
The Chrome metrics are in :mod:`sandbox.tasks.metrics_chrome`; ``infeasible`` is decided by the evaluation itself.
"""

from __future__ import annotations

import contextlib
import csv
import difflib
import io
import json
import os
import re
import sqlite3
import tempfile
from collections.abc import Callable
from typing import Any

from sandbox.tasks.matching import match_record, match_value_to_rule, similarity
from sandbox.tasks.metrics_chrome import CHROME_METRICS
from sandbox.tasks.values import file_bytes, file_text

Metric = Callable[..., float]
_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)")


def exact_match(result: Any, rules: dict[str, Any], **_: Any) -> float:
    return 1.0 if result == rules["expected"] else 0.0


def match_in_list(result: Any, rules: dict[str, Any], **_: Any) -> float:
    return 1.0 if result in rules["expected"] else 0.0


def is_in_list(result: Any, rules: dict[str, Any], **_: Any) -> float:
    return 1.0 if result is not None and rules["expected"] in result else 0.0


def literal_match(result: Any, expected: Any, **options: Any) -> float:
    kind = options.get("type", "str")
    ignore_case = bool(options.get("ignore_case", False))
    if kind == "str":
        a, b = str(result), str(expected)
        return 1.0 if (a.lower() == b.lower() if ignore_case else a == b) else 0.0
    if kind == "list":
        if (
            not isinstance(result, list | tuple)
            or not isinstance(expected, list | tuple)
            or len(result) != len(expected)
        ):
            return 0.0
        fold = (lambda s: str(s).lower()) if ignore_case else str
        return 1.0 if [fold(s) for s in result] == [fold(s) for s in expected] else 0.0
    raise ValueError(f"literal_match: type {kind!r} is not supported")


def check_include_exclude(result: Any, rules: dict[str, Any], **_: Any) -> float:
    if result is None:
        return 0.0
    include, exclude = rules.get("include", []), rules.get("exclude", [])
    return 1.0 if all(r in result for r in include) and all(r not in result for r in exclude) else 0.0


def fuzzy_match(result: Any, rules: dict[str, Any], **_: Any) -> float:
    return similarity(str(result), str(rules["expected"]))


def diff_text_file(result: Any, expect: Any, **_: Any) -> float:
    a, b = file_text(result), file_text(expect)
    if a is None or b is None:
        return 0.0
    return difflib.SequenceMatcher(a=a.splitlines(), b=b.splitlines()).ratio()


def compare_text_file(actual: Any, expected: Any, **options: Any) -> float:
    a, b = file_text(actual), file_text(expected)
    if a is None or b is None:
        return 0.0
    if options.get("ignore_blanks", False):
        a = re.sub(r"\s+", " ", re.sub(r"[\t\n]", " ", a).strip())
        b = re.sub(r"\s+", " ", re.sub(r"[\t\n]", " ", b).strip())
    if options.get("ignore_case", False):
        a, b = a.lower(), b.lower()
    return 1.0 if a == b else 0.0


def compare_terminal_and_txt(txt_file: Any, terminal_output: Any, **_: Any) -> float:
    text = file_text(txt_file)
    if text is None or not terminal_output:
        return 0.0
    return 1.0 if terminal_output == text else 0.0


def file_contains(file: Any, config: dict[str, Any], **_: Any) -> float:
    text = file_text(file)
    if text is None:
        return 0.0
    return 1.0 if all(str(t) in text for t in config["expected"]) else 0.0


def check_line_number(file: Any, line_number: dict[str, Any], **_: Any) -> float:
    text = file_text(file)
    if text is None:
        return 0.0
    count = sum(1 for line in text.splitlines() if _TIME.search(line))
    return 1.0 if count == int(line_number["expected"]) else 0.0


def check_list(result: Any, rules: dict[str, Any], **_: Any) -> float:
    text = file_text(result)
    if text is None:
        return 0.0
    expect = [re.compile(p) for p in rules.get("expect", [])]
    unexpect = [re.compile(p) for p in rules.get("unexpect", [])]
    lines = text.splitlines()
    found = all(any(p.search(line) for line in lines) for p in expect)
    clean = not any(p.search(line) for p in unexpect for line in lines)
    return 1.0 if found and clean else 0.0


def check_csv(result: Any, rules: dict[str, Any], **_: Any) -> float:
    text = file_text(result)
    if text is None:
        return 0.0
    records = list(csv.DictReader(io.StringIO(text)))
    expect, unexpect = rules.get("expect", []), rules.get("unexpect", [])
    found = all(any(match_record(r, rec) for rec in records) for r in expect)
    clean = not any(match_record(r, rec) for r in unexpect for rec in records)
    return 1.0 if found and clean else 0.0


def _load_json(value: Any, is_yaml: bool) -> Any:
    text = file_text(value)
    if text is None:
        return None
    if is_yaml:
        import yaml  # only for YAML tasks; PyYAML is not a dependency of the platform

        return yaml.safe_load(text)
    return json.loads(text)


def check_json(result: Any, rules: dict[str, Any], is_yaml: bool = False, **_: Any) -> float:
    data = _load_json(result, is_yaml)
    if data is None:
        return 0.0
    for rule in rules.get("expect", []):
        value = data
        for key in rule["key"]:
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                return 0.0
        if not match_value_to_rule(value, rule):
            return 0.0
    for rule in rules.get("unexpect", []):
        value = data
        for key in rule["key"]:
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                value = None
                break
        if value is not None and match_value_to_rule(value, rule):
            return 0.0
    return 1.0


def check_json_settings(actual: Any, expected: dict[str, Any], **_: Any) -> float:
    try:
        data = _load_json(actual, False)
    except ValueError:
        return 0.0
    if not isinstance(data, dict):
        return 0.0
    return 1.0 if all(k in data and data[k] == v for k, v in expected["expected"].items()) else 0.0


def check_direct_json_object(result: Any, rules: dict[str, Any], **_: Any) -> float:
    if isinstance(result, str):
        result = json.loads(result.strip().replace("'", '"'))
    if not isinstance(result, dict):
        return 0.0
    expected = rules["expected"]
    if not rules.get("expect_in_result", False):
        for key, want in expected.items():
            if expected.get("ignore_list_order", False):
                if sorted(want) != sorted(result.get(key) or []):
                    return 0.0
            elif want != result.get(key):
                return 0.0
        return 1.0
    for key, want in expected.items():
        got = result.get(key)
        if isinstance(want, list):
            if not any((isinstance(got, list) and w in got) or (isinstance(got, str) and w == got) for w in want):
                return 0.0
        elif isinstance(want, str):
            if not isinstance(got, str) or want not in got:
                return 0.0
        else:
            return 0.0
    return 1.0


def is_included_all_json_objects(gold_file: Any, result_file: Any, **_: Any) -> float:
    gold, result = _load_json(gold_file, False), _load_json(result_file, False)
    if not isinstance(gold, dict) or not isinstance(result, dict):
        return 0.0
    return 1.0 if all(k in result and result[k] == v for k, v in gold.items()) else 0.0


def run_sqlite3(result: Any, rules: dict[str, Any], **_: Any) -> float:
    data = file_bytes(result)
    if data is None:
        return 0.0
    fd, name = tempfile.mkstemp(suffix=".sqlite")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        with contextlib.closing(sqlite3.connect(name)) as db:
            row = db.execute(rules["sql"]).fetchone()
        return float((row[0] if row else 0) or 0)
    except sqlite3.Error:
        return 0.0
    finally:
        os.unlink(name)


def is_in_vm_clickboard(config: dict[str, Any], terminal_output: Any, **_: Any) -> float:
    """OSWorld's spelling. ``config`` (the ``result`` getter: a rule) holds ``expected``; the clipboard text comes
    from the ``expected`` getter (``vm_command_line`` of ``xsel``/``xclip``)."""
    want = config["expected"]
    text = terminal_output or ""
    return 1.0 if (all(w in text for w in want) if isinstance(want, list) else want in text) else 0.0


def check_moved_jpgs(directory_list: Any, rule: dict[str, Any], **_: Any) -> float:
    if not isinstance(directory_list, dict):
        return 0.0
    names = [node["name"] for node in directory_list.get("children", [])]
    expected = rule["expected"]
    return 1.0 if len(names) == len(expected) and set(names) == set(expected) else 0.0


def infeasible(*_: Any, **__: Any) -> float:
    """Never called: an infeasible task scores 1 exactly when its episode ended with ``FAIL``."""
    return 0.0


METRICS: dict[str, Metric] = {
    fn.__name__: fn
    for fn in (
        exact_match, match_in_list, is_in_list, literal_match, check_include_exclude, fuzzy_match, diff_text_file,
        compare_text_file, compare_terminal_and_txt, file_contains, check_line_number, check_list, check_csv,
        check_json, check_json_settings, check_direct_json_object, is_included_all_json_objects, run_sqlite3,
        is_in_vm_clickboard, check_moved_jpgs, infeasible,
    )
} | CHROME_METRICS  # fmt: skip
