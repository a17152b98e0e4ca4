"""``/metrics`` and the JSON logs of a real `sandbox server` on real containers: a warm-pool create, steps, a desktop
screenshot, bad calls, a warm reset; every counter and histogram moves by exactly that."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import docker
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sandbox.backends.base import LABEL_OWNER
from sandbox.client import Client
from sandbox.errors import NotFound
from tests.conftest import OWNER, RUN_ID, TEST_LABEL, owned_by, require_image
from tests.docker.servers import ServerProcess
from tests.polling import wait_until

pytestmark = pytest.mark.docker

MX_OWNER = f"{OWNER}-mx"
MX_SOCKETS = f"/run/sbx-test-{RUN_ID}-mx"
TERMINAL = {"kind": "terminal", "labels": TEST_LABEL}
OP = "sandbox_operation_duration_seconds"
STEPS = 4
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(http: httpx.Client) -> Samples:
    response = http.get("/metrics")
    assert response.status_code == 200, response.text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def server(docker_client: docker.DockerClient, tmp_path: Path) -> Iterator[ServerProcess]:
    for kind in ("terminal", "desktop"):
        require_image(docker_client, kind)
    process = ServerProcess(
        tmp_path,
        owner=MX_OWNER,
        socket_root=MX_SOCKETS,
        settings={"pools": [{"spec": TERMINAL, "min": 1, "max": 1, "max_starting": 1}]},
    )
    with owned_by(docker_client, MX_OWNER, MX_SOCKETS):
        try:
            process.start()
            yield process
        finally:
            process.stop()
            print(process.log_tail())
            listing = docker_client.api.containers(all=True, filters={"label": f"{LABEL_OWNER}={MX_OWNER}"})
            unlabelled = [c["Names"] for c in listing if c["Labels"].get("sandbox.test-run") != RUN_ID]
            assert not unlabelled, f"containers without this run's label: {unlabelled}"
            # The test deletes its sandboxes; the warm pool's instance goes with the last (here the only) replica.
            assert not listing, f"containers left after a graceful stop: {[c['Names'] for c in listing]}"


def test_metrics_and_logs_of_a_real_control_plane(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.http_url, timeout=120) as http, Client(server.grpc_target, timeout=120) as sdk:

        def pool_ready() -> bool:
            return sum(v for (n, _), v in scrape(http).items() if n == "sandbox_pool_ready_instances") == 1

        wait_until(pool_ready, 60, "the warm pool filling")
        before = scrape(http)

        terminal = sdk.create(**TERMINAL)  # the warm instance
        created = http.post("/v1/sandboxes", json={"kind": "desktop", "labels": TEST_LABEL})
        assert created.status_code == 201, created.text
        desktop = sdk.get(str(created.json()["id"]))
        during = scrape(http)

        for i in range(STEPS - 1):
            obs = terminal.step({"type": "exec", "cmd": f"echo {i}"})
            assert obs.exec is not None and obs.exec.stdout == f"{i}\n"
        desktop.step({"type": "move", "x": 10, "y": 10})
        shot = desktop.observe().screenshot
        assert shot is not None and shot.data.startswith(b"\x89PNG")
        raw = http.get(f"/v1/sandboxes/{desktop.id}/screenshot")
        assert raw.status_code == 200 and raw.content.startswith(b"\x89PNG")

        with pytest.raises(NotFound):
            sdk.get("term-000000000000")
        assert http.post("/v1/sandboxes/term-000000000000/exec", json={"cmd": "true"}).status_code == 404

        wait_until(pool_ready, 60, "the warm pool refilling")
        terminal.reset()  # a warm replica swaps in
        terminal.close()
        desktop.close()
        after = scrape(http)
        wait_until(pool_ready, 60, "the warm pool refilled (the stop then has a warm instance to remove)")

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    calls = f"{OP}_count"
    assert moved(calls, operation="create", kind="terminal", outcome="ok") == 1
    assert moved(calls, operation="create", kind="desktop", outcome="ok") == 1
    assert moved(calls, operation="step", kind="terminal", outcome="ok") == STEPS - 1
    assert moved(calls, operation="step", kind="desktop", outcome="ok") == 1
    assert moved(calls, operation="observe", kind="desktop", outcome="ok") == 1
    assert moved(calls, operation="screenshot", kind="desktop", outcome="ok") == 1
    assert moved(calls, operation="reset", kind="terminal", outcome="ok") == 1
    assert moved(calls, operation="delete", kind="terminal", outcome="ok") == 1
    assert moved(calls, operation="delete", kind="desktop", outcome="ok") == 1
    assert moved(calls, operation="get", kind="unknown", outcome="error") == 1
    assert moved(calls, operation="exec", kind="unknown", outcome="error") == 1
    shot_seconds = moved(f"{OP}_sum", operation="observe", kind="desktop", outcome="ok")
    assert 0 < shot_seconds < 30

    errors = "sandbox_api_errors_total"
    assert moved(errors, transport="grpc", method="GetSandbox", code="NOT_FOUND") == 1
    assert moved(errors, transport="rest", method="POST /v1/sandboxes/{sandbox_id}/exec", code="NOT_FOUND") == 1
    all_errors = [k for k in after if k[0] == errors]
    assert sum(value(after, errors, **dict(k[1])) - value(before, errors, **dict(k[1])) for k in all_errors) == 2

    assert moved("sandbox_provisions_total", kind="terminal", source="warm") == 2  # the create and the reset
    assert moved("sandbox_provisions_total", kind="terminal", source="cold") == 0
    assert moved("sandbox_provisions_total", kind="desktop", source="cold") == 1
    assert value(during, "sandbox_sandboxes", kind="terminal", state="running") == 1
    assert value(during, "sandbox_sandboxes", kind="desktop", state="running") == 1
    assert value(after, "sandbox_sandboxes", kind="desktop", state="running") == 0
    assert value(after, "sandbox_lifecycle_leader") == 1

    # The server logs to a file: one JSON object a line, with the sandbox and tenant of each sandbox line.
    lines = server.log.read_text().splitlines()
    assert not [line for line in lines if re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ", line)], "text logs"
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    for sandbox in (terminal, desktop):
        mine = [e for e in entries if e.get("sandbox_id") == sandbox.id]
        assert {e["message"].split(" ")[0] for e in mine} >= {"created", "deleted"}, mine
        assert all(e["tenant"] == sandbox.info.tenant and e["level"] and e["ts"] for e in mine)
    assert any(e["message"].startswith("reset sandbox") and e["sandbox_id"] == terminal.id for e in entries)
