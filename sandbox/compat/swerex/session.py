"""A SWE-ReX bash session in a sandbox: what SWE-ReX's ``LocalRuntime`` observes of its bash, over the helper's daemon.

The daemon (:mod:`sandbox.compat.swerex.inbox`) holds the bash on a pseudo-terminal and runs short programs of
terminal operations; this module decides what to send and what to wait for, so that an action gives the
observation (and raises the exception) SWE-ReX's own bash session gives:

- a command is checked with ``bash -n`` first (``BashIncorrectSyntaxError``); a multi-line command is sent as its
  top-level commands joined by ``;`` (split with bashlex, a dependency of swe-rex), so one prompt answers it;
- its output is what the terminal shows up to the prompt (``PS1`` is a marker), ANSI sequences removed and
  ``\\r\\n`` made ``\\n``; its exit code is ``$?`` echoed between markers after it;
- a timeout raises ``CommandTimeoutError`` and leaves the command running, as on a terminal: a
  ``BashInterruptAction`` (Ctrl-C, then Ctrl-Z and ``kill -9 %1``) gets the prompt back;
- an interactive command (``is_interactive_command``) waits for its ``expect`` strings, not for an exit code.

A wait longer than :data:`CHUNK_S` (or without a timeout) is made of several execs of at most that long: the
daemon keeps what the terminal printed between them, so the waits add up to one.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import bashlex
import pexpect
from swerex.exceptions import (
    BashIncorrectSyntaxError,
    CommandTimeoutError,
    NoExitCodeError,
    NonZeroExitCodeError,
)
from swerex.runtime.abstract import (
    BashAction,
    BashInterruptAction,
    BashObservation,
    CloseBashSessionResponse,
    CreateBashSessionRequest,
    CreateBashSessionResponse,
)

from sandbox.compat.swerex.box import Box, BoxError

PS1 = "SHELLPS1PREFIX"
"""The prompt, SWE-ReX's own marker: a program started in the session (another bash) prompts with it too."""
END_MARK = "UNIQUESTRING29234"
"""Ends a command bashlex could not split (the observation's ``expect_string`` then: SWE-ReX's value, so that an
observation reads the same), and the echo-off check after an interactive program quits."""
CODE_START, CODE_END = "SBXEXITCODE", "SBXEXITEND"
EXIT_CODE_OPS = (
    {"op": "send", "data": f"\necho {CODE_START}$?{CODE_END}\n"},
    {"op": "expect", "patterns": [CODE_END], "timeout": 1.0},
    {"op": "expect", "patterns": [PS1], "timeout": 0.1},
)
"""After a command: its exit code echoed between markers, and the prompt that follows."""
CHUNK_S = 60.0
"""The longest a single exec of the session waits for output."""
_ANSI = re.compile(r"\x1B[@-_][0-?]*[ -/]*[@-~]")


def clean(text: str) -> str:
    """What a terminal printed, without its escape sequences, lines ending in ``\\n``."""
    return _ANSI.sub("", text).replace("\r\n", "\n")


def split_commands(command: str) -> list[str]:
    """The top-level commands of a bash script, each with its here-documents and continuation lines (bashlex)."""
    text = command.strip()
    if not text or all(line.strip().startswith("#") for line in text.splitlines()):
        return []

    def span(node: Any) -> tuple[int, int]:
        start, end = node.pos
        for part in getattr(node, "parts", []):
            first, last = span(part)
            start, end = min(start, first), max(end, last)
        return start, end

    return [text[slice(*span(node))] for node in bashlex.parse(text)]


class BashSession:
    """One named bash in the sandbox's daemon."""

    def __init__(self, box: Box, request: CreateBashSessionRequest) -> None:
        self.box = box
        self.request = request
        self.name = request.session

    async def _ops(self, *ops: dict[str, Any], open_env: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Run the operations in order, up to the first that fails (a timeout, the end of the shell); the results."""
        wait = sum((op.get("timeout") or 0) + op.get("wait", 0) + op.get("seconds", 0) for op in ops)
        request: dict[str, Any] = {"session": self.name, "ops": list(ops)}
        if open_env is not None:
            request.update(open=True, env=open_env)
        reply = await self.box.session(request, wait_s=wait + 1)
        if "error" in reply:
            raise BoxError(f"session {self.name!r}: {reply['error']}")
        return list(reply["results"])

    async def _expect(
        self,
        patterns: list[str],
        timeout: float | None,
        *,
        first: list[dict[str, Any]],
        then: tuple[dict[str, Any], ...] = (),
        open_env: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Run ``first``, wait for a pattern up to ``timeout`` (None: for ever; an exec at most :data:`CHUNK_S` long
        at a time), then run ``then`` (in the same exec as the wait's end): the wait's result and then's (up to the
        first failing), or only the failing result of ``first``. ``open_env``: start the session's bash first."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        ops = first
        while True:
            left = CHUNK_S if deadline is None else max(deadline - loop.time(), 0.0)
            wait = {"op": "expect", "patterns": patterns, "timeout": min(left, CHUNK_S)}
            results = await self._ops(*ops, wait, *then, open_env=open_env)
            open_env = None
            if len(results) <= len(ops):  # one of ``first`` failed (the syntax check)
                return results[-1:]
            tail = results[len(ops) :]
            if tail[0]["ok"] or tail[0].get("eof") or (deadline is not None and loop.time() >= deadline):
                return tail
            ops = []

    async def start(self) -> CreateBashSessionResponse:
        line = [f"source {path}" for path in self.request.startup_source]
        if line:
            line.append("sleep 0.3")
        line += [f"export PS1='{PS1}'", "export PS2=''", "export PS0=''"]
        # bash gets 0.3 s to set its terminal up before the first line (typed earlier, the kernel would echo it).
        first: list[dict[str, Any]] = [{"op": "sleep", "seconds": 0.3}, {"op": "send", "data": " ; ".join(line) + "\n"}]
        env = {"PS1": PS1, "PS2": "", "PS0": ""}
        got = (await self._expect([PS1], self.request.startup_timeout, first=first, open_env=env))[0]
        _raise_unless_matched(got, "starting the session")
        return CreateBashSessionResponse(output=clean(got["before"]))

    async def run(self, action: BashAction | BashInterruptAction) -> BashObservation:
        if isinstance(action, BashInterruptAction):
            return await self.interrupt(action)
        if action.is_interactive_command or action.is_interactive_quit:
            return await self._interactive(action)
        observation = await self._command(action)
        if action.check == "raise" and observation.exit_code != 0:
            message = (
                f"Command {action.command!r} failed with exit code {observation.exit_code}. "
                f"Here is the output:\n{observation.output!r}"
            )
            raise NonZeroExitCodeError(f"{action.error_msg}: {message}" if action.error_msg else message)
        return observation

    async def _command(self, action: BashAction) -> BashObservation:
        try:
            text = " ; ".join(split_commands(action.command))
            patterns = [*action.expect, PS1]
        except Exception:  # bashlex fails on much valid bash (NotImplementedError, TypeError, ...): mark the end
            text = f"{action.command}\n TMPEXITCODE=$? ; sleep 0.1; echo -n '{END_MARK}' ; (exit $TMPEXITCODE)"
            patterns = [END_MARK]
        first = [{"op": "syntax", "command": action.command}, {"op": "send", "data": text + "\n"}]
        exit_code_ops = () if action.check == "ignore" else EXIT_CODE_OPS
        got, *exit_code_results = await self._expect(patterns, action.timeout, first=first, then=exit_code_ops)
        if got.get("syntax"):
            raise _syntax_error(action.command, got["syntax"])
        if got.get("timeout"):
            raise CommandTimeoutError(f"timeout after {action.timeout} seconds while running command {text!r}")
        _raise_unless_matched(got, f"running command {text!r}")
        output, matched = clean(got["before"]), patterns[got["index"]]
        if action.check == "ignore":
            return BashObservation(output=output, exit_code=None, expect_string=matched)
        try:
            code_output, exit_code = await self._exit_code(action.command, exit_code_results)
        except Exception:
            if action.check == "raise":
                raise
            return BashObservation(output=output, exit_code=None, expect_string=matched)
        output = (output + code_output).replace(END_MARK, "").replace(PS1, "")
        return BashObservation(output=output, exit_code=exit_code, expect_string=matched)

    async def _exit_code(self, command: str, results: list[dict[str, Any]]) -> tuple[str, int]:
        """``$?`` of the command just run, echoed between markers by :data:`EXIT_CODE_OPS` (run now if they did not
        run after the command); what the terminal showed before it."""
        if not results:
            results = await self._ops(*EXIT_CODE_OPS)
        if len(results) < 2 or not results[1]["ok"]:
            if len(results) >= 2 and results[1].get("eof"):
                raise pexpect.EOF("End Of File (EOF): the session's shell exited")
            raise NoExitCodeError("timeout while getting exit code")
        raw = clean(results[1]["before"])
        codes = re.findall(f"{CODE_START}([0-9]+)", raw)
        if len(codes) != 1:
            raise NoExitCodeError(f"failed to parse exit code from output {raw!r} (command: {command!r})")
        if len(results) < 3 or not results[2]["ok"]:
            raise CommandTimeoutError("Timeout while getting PS1 after exit code extraction")
        return raw.split(CODE_START)[0], int(codes[0])

    async def _interactive(self, action: BashAction) -> BashObservation:
        patterns = [*action.expect, PS1]
        send = {"op": "send", "data": action.command + "\n"}
        got = (await self._expect(patterns, action.timeout, first=[send]))[0]
        if got.get("timeout"):
            raise CommandTimeoutError(
                f"timeout after {action.timeout} seconds while running command {action.command!r}"
            )
        _raise_unless_matched(got, f"running command {action.command!r}")
        output, matched = clean(got["before"]), patterns[got["index"]]
        if action.is_interactive_quit:
            results = await self._ops(
                {"op": "echo_off"},
                {"op": "send", "data": f"stty -echo; echo '{END_MARK}'\n"},
                {"op": "expect", "patterns": [END_MARK], "timeout": 1.0},
                {"op": "expect", "patterns": [PS1], "timeout": 1.0},
            )
            for result in results[2:]:
                _raise_unless_matched(result, "waiting for the prompt after the program quit")
            if len(results) < 4:
                raise pexpect.TIMEOUT("Timeout exceeded waiting for the prompt after the program quit")
        else:
            output = output.lstrip().removeprefix(action.command).strip()
        return BashObservation(output=output, exit_code=0, expect_string=matched)

    async def interrupt(self, action: BashInterruptAction) -> BashObservation:
        """Ctrl-C until the prompt (or an ``expect`` string) shows, ``n_retry`` times; then Ctrl-Z, ``kill -9 %1``."""
        patterns = [*action.expect, PS1]
        wait = {"op": "expect", "patterns": patterns, "timeout": action.timeout}
        for _ in range(action.n_retry):
            results = await self._ops({"op": "control", "char": "c"}, wait, {"op": "eat", "wait": 0.5})
            if len(results) == 3 and results[2]["ok"]:
                output = (clean(results[1]["before"]) + clean(results[2]["output"])).strip()
                return BashObservation(output=output, exit_code=0, expect_string=patterns[results[1]["index"]])
            await asyncio.sleep(0.2)
        results = await self._ops(
            {"op": "control", "char": "z"},
            wait,
            {"op": "send", "data": "kill -9 %1\n"},
            wait,
            {"op": "eat", "wait": 0.5},
        )
        if len(results) < 5 or not results[4]["ok"]:
            raise pexpect.TIMEOUT("Failed to interrupt session")
        output = (results[1]["before"] + results[3]["before"] + clean(results[4]["output"])).strip()
        return BashObservation(output=output, exit_code=0, expect_string=patterns[results[3]["index"]])

    async def close(self) -> CloseBashSessionResponse:
        with contextlib.suppress(BoxError):  # the daemon (or the sandbox) is gone, and the session with it
            await self.box.session({"session": self.name, "close": True}, wait_s=1)
        return CloseBashSessionResponse()


def _raise_unless_matched(result: dict[str, Any], doing: str) -> None:
    if result.get("eof"):
        raise pexpect.EOF(f"End Of File (EOF) while {doing}: the session's shell exited")
    if not result.get("ok"):
        raise pexpect.TIMEOUT(f"Timeout exceeded while {doing}")


def _syntax_error(command: str, found: dict[str, Any]) -> BashIncorrectSyntaxError:
    message = (
        f"Error (exit code {found['exit_code']}) while checking bash command \n{command!r}\n"
        f"---- Stderr ----\n{found['stderr']}\n---- Stdout ----\n{found['stdout']}"
    )
    return BashIncorrectSyntaxError(
        message, extra_info={"bash_stdout": found["stdout"], "bash_stderr": found["stderr"]}
    )
