"""`sandbox server` merges its flags onto the config file: the file's backend stays unless a flag overrides it."""

from __future__ import annotations

import pytest

from sandbox.cli.server import _backend_settings


def test_no_config_is_the_docker_backend_with_the_flags() -> None:
    assert _backend_settings(None, owner="prod", socket_root="/run/x") == {
        "type": "docker",
        "owner": "prod",
        "socket_root": "/run/x",
    }


def test_the_config_files_backend_is_kept_and_flags_win() -> None:
    config = {"type": "docker", "owner": "file", "runtime": "runsc"}
    assert _backend_settings(config, owner="flag", socket_root=None) == {
        "type": "docker",
        "owner": "flag",
        "runtime": "runsc",
    }
    assert config["owner"] == "file", "the caller's dict is not changed"


def test_another_backend_is_not_forced_to_docker() -> None:
    config = {"type": "kubernetes", "namespace": "sandboxes"}
    assert _backend_settings(config, owner=None, socket_root=None) == config
    with pytest.raises(ValueError, match="--socket-root applies to the docker backend"):
        _backend_settings(config, owner=None, socket_root="/run/x")
