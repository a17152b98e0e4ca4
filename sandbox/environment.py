"""The environment variables the platform's processes read, and the one place they are read.

Everything else takes its configuration as arguments (``ServerSettings``, each backend's config, the CLI's options,
whose ``envvar=`` names are the CLI's own declarations); a module that wants a variable calls the function here, so
``grep sandbox/environment.py`` lists every one, and tests/unit/test_environment.py fails on a read anywhere else.
The in-sandbox agent is a program of its own: its entry point (``sandbox/agent/__main__.py``) reads its variables.

Each function reads at call time (a test's ``monkeypatch.setenv`` is seen); an empty value counts as unset.

    variable              read by                                        meaning
    SANDBOX_TARGET        the SDK's Client, the CLI                      gRPC address of the control plane
    SANDBOX_TOKENS_FILE   the server's token registry                    JSON tokens (and quotas) file
    SANDBOX_TOKENS        the server's token registry                    the same document inline
    SANDBOX_NOVNC_DIR     the web view                                   noVNC files (Debian: /usr/share/novnc)
    SANDBOX_ANDROID_SDK   the android image build                        an Android SDK folder
    POD_NAMESPACE         the kubernetes backend (downward API)          the control plane's own namespace
    XDG_STATE_HOME        the embedded store's default path              ~/.local/state when unset
    XDG_DATA_HOME         the trajectory store's default folder          ~/.local/share when unset
"""

from __future__ import annotations

import os

TARGET = "SANDBOX_TARGET"
TOKENS_FILE = "SANDBOX_TOKENS_FILE"
TOKENS = "SANDBOX_TOKENS"
NOVNC_DIR = "SANDBOX_NOVNC_DIR"
ANDROID_SDK = "SANDBOX_ANDROID_SDK"
POD_NAMESPACE = "POD_NAMESPACE"


def value(name: str) -> str | None:
    """The variable ``name``, or None when it is unset or empty."""
    return os.environ.get(name) or None


def target() -> str | None:
    return value(TARGET)


def tokens_file() -> str | None:
    return value(TOKENS_FILE)


def tokens_inline() -> str | None:
    return value(TOKENS)


def novnc_dir() -> str | None:
    return value(NOVNC_DIR)


def android_sdk() -> str | None:
    return value(ANDROID_SDK)


def pod_namespace() -> str | None:
    return value(POD_NAMESPACE)


def state_home() -> str:
    """``$XDG_STATE_HOME``, else ``~/.local/state``."""
    return value("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")


def data_home() -> str:
    """``$XDG_DATA_HOME``, else ``~/.local/share``."""
    return value("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
