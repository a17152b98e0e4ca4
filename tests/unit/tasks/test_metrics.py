"""OSWorld's metrics on literal inputs, with OSWorld's argument conventions and semantics."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sandbox.tasks.matching import compare_urls, lcs_length, match_value_to_rule, similarity
from sandbox.tasks.metrics import METRICS
from sandbox.tasks.values import FileData


def m(name: str, *args: Any, **options: Any) -> float:
    return METRICS[name](*args, **options)


def f(text: str | bytes, path: str = "/workspace/f") -> FileData:
    return FileData(path, text.encode() if isinstance(text, str) else text)


def test_string_and_list_comparisons() -> None:
    assert m("exact_match", "7", {"expected": "7"}) == 1.0
    assert m("exact_match", "7\n", {"expected": "7"}) == 0.0
    assert m("match_in_list", "b", {"expected": ["a", "b"]}) == 1.0
    assert m("match_in_list", "c", {"expected": ["a", "b"]}) == 0.0
    assert m("is_in_list", ["a", "b"], {"expected": "b"}) == 1.0
    assert m("is_in_list", None, {"expected": "b"}) == 0.0
    assert m("literal_match", "Abc", "abc") == 0.0
    assert m("literal_match", "Abc", "abc", ignore_case=True) == 1.0
    assert m("literal_match", ["A", 1], ["a", "1"], type="list", ignore_case=True) == 1.0
    assert m("literal_match", ["A"], ["A", "B"], type="list") == 0.0
    with pytest.raises(ValueError, match="type 'set'"):
        m("literal_match", 1, 1, type="set")


def test_check_include_exclude() -> None:
    rules = {"include": ["docs/a.md", "docs/b.md"], "exclude": ["workspace/"]}
    assert m("check_include_exclude", "docs/a.md\ndocs/b.md\n", rules) == 1.0
    assert m("check_include_exclude", "workspace/docs/a.md\nworkspace/docs/b.md\n", rules) == 0.0
    assert m("check_include_exclude", "docs/a.md\n", rules) == 0.0
    assert m("check_include_exclude", None, rules) == 0.0
    assert m("check_include_exclude", "", {}) == 1.0


def test_fuzzy_match_is_rapidfuzz_ratio() -> None:
    # rapidfuzz.fuzz.ratio values: ("this is a test", "this is a test!") -> 96.55..., ("fuzzy", "wuzzy") -> 80
    assert m("fuzzy_match", "this is a test", {"expected": "this is a test!"}) == pytest.approx(0.9655172)
    assert m("fuzzy_match", "fuzzy", {"expected": "wuzzy"}) == pytest.approx(0.8)
    assert m("fuzzy_match", "", {"expected": ""}) == 1.0
    assert m("fuzzy_match", "abc", {"expected": ""}) == 0.0


def test_lcs_matches_the_textbook_dynamic_programme() -> None:
    def dp(a: str, b: str) -> int:
        table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i, x in enumerate(a):
            for j, y in enumerate(b):
                table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
        return table[-1][-1]

    rng = random.Random(7)
    for _ in range(300):
        a = "".join(rng.choice("abcd") for _ in range(rng.randrange(0, 40)))
        b = "".join(rng.choice("abce") for _ in range(rng.randrange(0, 40)))
        assert lcs_length(a, b) == dp(a, b)
    assert similarity("a" * 5000, "a" * 5000) == 1.0


def test_file_metrics() -> None:
    expected = f("a\nb\nc\n", "https://x.test/expected")
    assert m("diff_text_file", f("a\nb\nc\n"), expected) == 1.0
    assert m("diff_text_file", f("a\nb\n"), expected) == pytest.approx(0.8)
    assert m("diff_text_file", None, expected) == 0.0
    assert m("compare_text_file", f("a\nb\nc\n"), expected) == 1.0
    assert m("compare_text_file", f("A  b\tc"), expected) == 0.0
    assert m("compare_text_file", f("A  b\tc"), expected, ignore_blanks=True, ignore_case=True) == 1.0
    assert m("compare_text_file", f(""), f("")) == 1.0
    assert m("compare_text_file", None, expected) == 0.0
    assert m("file_contains", f("hello world\n"), {"expected": ["hello", "world"]}) == 1.0
    assert m("file_contains", f("hello\n"), {"expected": ["hello", "world"]}) == 0.0
    assert m("file_contains", None, {"expected": []}) == 0.0
    assert m("check_line_number", f("10:00:01 a\nno time\n23:59:59 b\n"), {"expected": "2"}) == 1.0
    assert m("compare_terminal_and_txt", f("out\n"), "out\n") == 1.0
    assert m("compare_terminal_and_txt", f("out\n"), "") == 0.0


def test_check_list_and_check_csv() -> None:
    rules = {"expect": [r"^alpha$", r"be+ta"], "unexpect": [r"gamma"]}
    assert m("check_list", f("alpha\nbeeta\n"), rules) == 1.0
    assert m("check_list", f("alpha\nbeeta\ngamma\n"), rules) == 0.0
    assert m("check_list", f("alphas\nbeta\n"), rules) == 0.0
    csv_rules = {"expect": [{"name": "Ada", "role": "admin"}], "unexpect": [{"name": "Eve"}]}
    assert m("check_csv", f("name,role\nAda,admin\nBob,user\n"), csv_rules) == 1.0
    assert m("check_csv", f("name,role\nAda,admin\nEve,user\n"), csv_rules) == 0.0
    assert m("check_csv", f("name,role\nAda,user\n"), csv_rules) == 0.0


def test_check_json_rules() -> None:
    data = f('{"port": 9090, "debug": false, "name": "demo", "tags": ["a", "b"], "ratio": 0.51}')
    expect = [
        {"key": ["port"], "method": "eq", "ref": 9090},
        {"key": ["debug"], "method": "eq", "ref": False},
        {"key": ["name"], "method": "re.I", "ref": "^DE"},
        {"key": ["tags", 1], "method": "eq", "ref": "b"},
        {"key": ["ratio"], "method": "approx:0.02", "ref": 0.5},
        {"key": ["port"], "method": "range.ee", "ref": [9000, 9090]},
    ]
    assert m("check_json", data, {"expect": expect}) == 1.0
    assert m("check_json", data, {"expect": [{"key": ["missing"], "method": "eq", "ref": 1}]}) == 0.0
    assert m("check_json", data, {"unexpect": [{"key": ["debug"], "method": "eq", "ref": False}]}) == 0.0
    assert m("check_json", data, {"unexpect": [{"key": ["missing"], "method": "eq", "ref": 1}]}) == 1.0
    assert m("check_json", None, {"expect": expect}) == 0.0
    assert m("check_json_settings", data, {"expected": {"port": 9090}}) == 1.0
    assert m("check_json_settings", f("not json"), {"expected": {"port": 9090}}) == 0.0
    assert m("is_included_all_json_objects", f('{"a": 1}'), data) == 0.0
    assert m("is_included_all_json_objects", f('{"port": 9090}'), data) == 1.0


def test_value_rules() -> None:
    assert match_value_to_rule("a,b", {"method": "str_list_eq", "ref": ["a", "b"]})
    assert match_value_to_rule("'b,a'", {"method": "str_set_eq", "ref": ["a", "b"]})
    assert not match_value_to_rule(3, {"method": "range.tt", "ref": [3, 5]})
    assert match_value_to_rule(3, {"method": "ge", "ref": 3})
    assert not match_value_to_rule("x", {"method": "approx:1", "ref": 2})
    with pytest.raises(ValueError, match="unknown rule method"):
        match_value_to_rule(1, {"method": "near", "ref": 1})


def test_check_direct_json_object() -> None:
    want = {"expected": {"name": "Ada Lovelace", "email": "ada@example.com"}}
    assert m("check_direct_json_object", {"name": "Ada Lovelace", "email": "ada@example.com", "x": 1}, want) == 1.0
    assert m("check_direct_json_object", {"name": "Ada", "email": "ada@example.com"}, want) == 0.0
    assert m("check_direct_json_object", "{'name': 'Ada Lovelace', 'email': 'ada@example.com'}", want) == 1.0
    assert m("check_direct_json_object", None, want) == 0.0
    loose = {"expected": {"city": ["Paris", "Lyon"], "title": "Report"}, "expect_in_result": True}
    assert m("check_direct_json_object", {"city": "Lyon", "title": "Annual Report 2024"}, loose) == 1.0
    assert m("check_direct_json_object", {"city": "Nice", "title": "Annual Report 2024"}, loose) == 0.0


def test_run_sqlite3(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE t (n INTEGER)")
        db.executemany("INSERT INTO t VALUES (?)", [(1,), (1,)])
        db.commit()
    data = f(path.read_bytes())
    assert m("run_sqlite3", data, {"sql": "SELECT count(*) = 2 FROM t"}) == 1.0
    assert m("run_sqlite3", data, {"sql": "SELECT count(*) = 3 FROM t"}) == 0.0
    assert m("run_sqlite3", f(b"not a database, not at all"), {"sql": "SELECT count(*) FROM t"}) == 0.0


def test_os_metrics() -> None:
    # OSWorld's argument order: the rule comes from the result getter, the clipboard text from the expected one.
    assert m("is_in_vm_clickboard", {"expected": "/home/user/Data3"}, "/home/user/Data3\n") == 1.0
    assert m("is_in_vm_clickboard", {"expected": ["a", "b"]}, "a only") == 0.0
    tree = {"type": "directory", "name": "photos", "children": [{"type": "file", "name": "a.jpg"}]}
    assert m("check_moved_jpgs", tree, {"expected": ["a.jpg"]}) == 1.0
    assert m("check_moved_jpgs", tree, {"expected": ["a.jpg", "b.jpg"]}) == 0.0
    assert m("check_moved_jpgs", None, {"expected": []}) == 0.0


def test_urls() -> None:
    assert compare_urls("https://www.Example.com/", "https://example.com")
    assert compare_urls("//example.com/a", "http://example.com/a")  # no scheme: http, as OSWorld assumes
    assert not compare_urls("https://example.com/a?x=1", "https://example.com/a")
    assert not compare_urls("https://example.com", None) and compare_urls(None, None)


def test_chrome_metrics() -> None:
    tabs = [{"url": "file:///tmp/pages/guide.html"}, {"url": "file:///tmp/pages/news.html"}]
    rule = {"type": "url", "urls": ["file:///tmp/pages/news.html", "file:///tmp/pages/guide.html"]}
    assert m("is_expected_tabs", tabs, rule) == 1.0
    assert m("is_expected_tabs", [*tabs, {"url": "about:blank"}], rule) == 0.0
    assert m("is_expected_tabs", [], rule) == 0.0
    assert m("is_expected_active_tab", "https://www.x.test/", {"type": "url", "url": "https://x.test"}) == 1.0
    assert m("is_expected_active_tab", {"url": "https://x.test/a"}, {"type": "url", "url": "https://x.test"}) == 0.0
    approx = {"type": "url", "url": "https://x.test/a?q=1"}
    assert m("is_expected_active_tab_approximate", "https://x.test/a?q=2", approx) == 1.0
    assert (
        m("is_expected_url_pattern_match", "https://x.test/welcome.html?name=Ada", {"expected": [r"welcome", "Ada"]})
        == 1.0
    )
    assert m("is_expected_url_pattern_match", {"url": "https://x.test/"}, {"expected": [r"welcome"]}) == 0.0
    assert m("is_expected_search_query", {"url": "https://s.test/?q=cats"}, {"expect": {"pattern": r"q=cats"}}) == 1.0
    bookmarks = {"bookmark_bar": {"children": [
        {"type": "folder", "name": "Work", "children": []},
        {"type": "folder", "name": "Liked Authors", "children": [{"type": "url", "url": "https://a.test"}]},
        {"type": "url", "url": "https://x.test", "name": "X"},
    ]}}  # fmt: skip
    assert (
        m(
            "is_expected_bookmarks",
            bookmarks,
            {"type": "bookmark_bar_folders_names", "names": ["Work", "Liked Authors"]},
        )
        == 1.0
    )
    assert (
        m("is_expected_bookmarks", bookmarks, {"type": "bookmark_bar_websites_urls", "urls": ["https://x.test"]}) == 1.0
    )
    liked = {"type": "liked_authors_websites_urls", "urls": [["https://b.test", "https://a.test"]]}
    assert m("is_expected_bookmarks", bookmarks, liked) == 1.0
    assert m("is_expected_bookmarks", [], liked) == 0.0
    history = [("https://news.test/a", "A", 1), ("https://mail.test/", "M", 2)]
    assert m("check_history_deleted", history, {"type": "keywords", "keywords": ["news"]}) == 0.0
    assert m("check_history_deleted", history, {"type": "keywords", "keywords": ["shop"]}) == 1.0
    cookies = [(0, "https://.track.test", "id")]
    assert m("is_cookie_deleted", cookies, {"type": "domains", "domains": ["https://.track.test"]}) == 0.0
    assert m("is_cookie_deleted", cookies, {"type": "domains", "domains": ["https://other.test"]}) == 1.0
    assert (
        m("check_enabled_experiments", ["smooth-scrolling@2"], {"type": "names", "names": ["smooth-scrolling"]}) == 1.0
    )
    assert m("check_font_size", {"default_font_size": 20}, {"type": "range", "min": 16, "max": 24}) == 1.0
    assert m("check_font_size", {"default_font_size": 16}, {"type": "value", "value": 20}) == 0.0
    shortcuts = {"x.desktop": "[Desktop Entry]\nName=Acme Docs\nExec=chromium https://acme.test\n"}
    assert m("is_shortcut_on_desktop", shortcuts, {"type": "name", "name": "Acme Docs"}) == 1.0
    assert m("is_shortcut_on_desktop", shortcuts, {"type": "exec", "exec": "chromium https://other.test"}) == 0.0
    assert m("is_added_to_steam_cart", {"content": "<li>Game A</li><li>Game B</li>"}, {"items": ["Game A"]}) == 1.0
    assert m("is_expected_installed_extensions", ["A", "B"], {"expected": ["A"]}) == 1.0
