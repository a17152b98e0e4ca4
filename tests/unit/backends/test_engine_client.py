"""The engine client skips requests' environment look-ups over a unix socket only."""

from __future__ import annotations

import pytest

from sandbox.backends.docker.engine_client import connect


def test_over_a_unix_socket_no_proxy_or_netrc_look_ups() -> None:
    client = connect("unix:///run/nothing-here.sock", version="1.41")
    assert client.api.trust_env is False


def test_over_tcp_the_proxy_variables_still_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    client = connect("tcp://127.0.0.1:2375", version="1.41")
    assert client.api.trust_env is True
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    settings = client.api.merge_environment_settings("https://127.0.0.1:2375/info", {}, None, None, None)
    assert settings["proxies"].get("https") == "http://127.0.0.1:3128"
