"""The bounded tail of each sandbox's command output (``sandbox.service.output_tail``)."""

from __future__ import annotations

from sandbox.models import ExecResult
from sandbox.service.output_tail import OutputTails


def result(stdout: str = "", stderr: str = "", exit_code: int | None = 0, timed_out: bool = False) -> ExecResult:
    return ExecResult(exit_code=exit_code, stdout=stdout, stderr=stderr, timed_out=timed_out)


def test_a_tail_keeps_the_command_its_output_and_how_it_ended() -> None:
    tails = OutputTails()
    tails.add("a", "echo  hi\n", result("hi\n"))
    tails.add("a", ["sh", "-c", "false"], result(stderr="nope\n", exit_code=1))
    tails.add("a", "sleep 9", result(exit_code=None, timed_out=True))
    assert tails.tail("a") == ["$ echo hi", "hi", "$ sh -c false", "nope", "[exit 1]", "$ sleep 9", "[timed out]"]
    assert tails.tail("a", 2) == ["$ sleep 9", "[timed out]"] and tails.tail("b") == []
    tails.forget("a")
    assert tails.tail("a") == []


def test_a_tail_is_bounded_in_lines_and_characters() -> None:
    tails = OutputTails(lines=10, line_chars=20)
    tails.add("a", "yes", result("".join(f"line {n}\n" for n in range(100_000)) + "x" * 10_000 + "\n"))
    kept = tails.tail("a")
    assert len(kept) == 10 and kept[-2] == "line 99999" and kept[-1] == "x" * 19 + "…"
    assert all(len(line) <= 20 for line in kept)
