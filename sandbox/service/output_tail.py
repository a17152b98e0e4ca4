"""The tail of each sandbox's recent command output, for the web view's terminal cards and pages.

Nothing else keeps a terminal's output: ``exec`` returns it to its caller and forgets it. This keeps the last
``LINES`` lines per sandbox (the command as ``$ cmd``, then its stdout and stderr, then ``[exit N]`` when it
failed), each cut to ``LINE_CHARS``: at most ~40 KB per sandbox, whatever the commands print. It lives in this
control-plane process, like the recent actions: with several replicas behind a balancer, a page shows what ran
through the replica it asks. A sandbox's tail goes when it is deleted, reset or expired.
"""

from __future__ import annotations

from collections import deque

from sandbox.models import ExecResult

LINES = 200
LINE_CHARS = 200
CMD_CHARS = 200


class OutputTails:
    def __init__(self, lines: int = LINES, line_chars: int = LINE_CHARS) -> None:
        self._lines = lines
        self._line_chars = line_chars
        self._tails: dict[str, deque[str]] = {}

    def add(self, sandbox_id: str, cmd: str | list[str], result: ExecResult) -> None:
        """Note one command and what it printed."""
        text = cmd if isinstance(cmd, str) else " ".join(cmd)
        tail = self._tails.setdefault(sandbox_id, deque(maxlen=self._lines))
        tail.append(self._cut("$ " + " ".join(text.split())[:CMD_CHARS]))
        for stream in (result.stdout, result.stderr):
            for line in self._last_lines(stream):
                tail.append(self._cut(line))
        if result.timed_out:
            tail.append("[timed out]")
        elif result.exit_code not in (0, None):
            tail.append(f"[exit {result.exit_code}]")

    def tail(self, sandbox_id: str, lines: int = LINES) -> list[str]:
        """The last ``lines`` lines, oldest first."""
        found = self._tails.get(sandbox_id)
        if not found or lines <= 0:
            return []
        return list(found)[-lines:]

    def forget(self, sandbox_id: str) -> None:
        self._tails.pop(sandbox_id, None)

    def _last_lines(self, stream: str) -> list[str]:
        """The last ``LINES`` lines of ``stream``, each cut short before the rest is split (never a huge output
        whole)."""
        chunks = stream.rstrip("\n").rsplit("\n", self._lines)[-self._lines :] if stream else []
        return [chunk[: self._line_chars + 1] for chunk in chunks]

    def _cut(self, line: str) -> str:
        line = line.rstrip("\r")
        return line if len(line) <= self._line_chars else line[: self._line_chars - 1] + "…"
