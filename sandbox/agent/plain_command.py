"""A one-shot command given as a string that bash would only split into words runs without bash.

Starting bash costs about 0.7 ms of CPU here, more than the ``true`` it would then run: for a step like ``ls -la
/workspace`` or ``python3 script.py --seed 3``, that is most of the step's cost inside the sandbox. A string
qualifies only when bash would do nothing to it but split it at spaces: no quotes, no expansion of any kind
(``$``, globs, ``~``, braces), no redirection, pipes, lists or comments, no assignment in front, and a first word
that is not a keyword or builtin (``cd``, ``export``, ``time`` … mean something only inside bash; ``true`` and
``false`` are the same as their programs). If the program cannot be started directly (not found, not executable,
a script without ``#!``), the command runs through bash after all, so its exit status and message are bash's.
"""

from __future__ import annotations

import re

_PLAIN = re.compile(r"[A-Za-z0-9_./:,@%+=-]+(?: +[A-Za-z0-9_./:,@%+=-]+)*")
_BASH_ONLY = frozenset(
    {
        ".",
        ":",
        "[",
        "alias",
        "bg",
        "bind",
        "break",
        "builtin",
        "caller",
        "cd",
        "command",
        "compgen",
        "complete",
        "compopt",
        "continue",
        "declare",
        "dirs",
        "disown",
        "echo",
        "enable",
        "eval",
        "exec",
        "exit",
        "export",
        "fc",
        "fg",
        "getopts",
        "hash",
        "help",
        "history",
        "jobs",
        "kill",
        "let",
        "local",
        "logout",
        "mapfile",
        "popd",
        "printf",
        "pushd",
        "pwd",
        "read",
        "readarray",
        "readonly",
        "return",
        "set",
        "shift",
        "shopt",
        "source",
        "suspend",
        "test",
        "times",
        "trap",
        "type",
        "typeset",
        "ulimit",
        "umask",
        "unalias",
        "unset",
        "wait",
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "case",
        "esac",
        "for",
        "select",
        "while",
        "until",
        "do",
        "done",
        "in",
        "function",
        "time",
        "coproc",
    }
)
"""bash's builtins and keywords (``compgen -b -k`` of bash 5.2), less ``true`` and ``false``."""


def direct_argv(command: str) -> list[str] | None:
    """The words to run without bash, or None when the string needs bash."""
    text = command.strip(" ")
    if not _PLAIN.fullmatch(text):
        return None
    words = text.split()
    if "=" in words[0] or words[0] in _BASH_ONLY:
        return None
    return words
