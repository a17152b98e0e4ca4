"""The control plane as users reach it: a real `sandbox server` process, real containers, and the same
scenario through the gRPC SDK, REST and the CLI."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest
from PIL import Image

from sandbox.client import AsyncClient, Client
from sandbox.errors import FailedPrecondition, NotFound
from sandbox.gym import SandboxEnv
from sandbox.models import Observation
from sandbox.models.images import decode
from tests.conftest import OWNER, RUN_ID
from tests.docker.servers import SANDBOX_BIN, ServerProcess

pytestmark = pytest.mark.docker

TOKEN = "tenant-a-token-0123456789"
OTHER_TOKEN = "tenant-b-token-0123456789"


@dataclass
class ControlPlane:
    grpc_target: str
    http_url: str
    env: dict[str, str]


@pytest.fixture(scope="module")
def control_plane(backend: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    server = ServerProcess(
        tmp_path_factory.mktemp("cp"),
        owner=OWNER,
        socket_root=f"/run/sbx-test-{RUN_ID}",
        tokens={TOKEN: "alpha", OTHER_TOKEN: "beta"},
    )
    try:
        server.start()
        yield ControlPlane(server.grpc_target, server.http_url, server.env(TOKEN))
    finally:
        server.stop()
        print(server.log.read_text()[-3000:])


# ---------------------------------------------------------------------------- one scenario, three skins


class Driver(Protocol):
    def create(self, kind: str) -> str: ...
    def exec(self, sandbox_id: str, cmd: str, *, keep_background: bool = False) -> tuple[int, str]: ...
    def step(self, sandbox_id: str, action: dict[str, Any]) -> None: ...
    def screenshot(self, sandbox_id: str) -> bytes: ...
    def reset(self, sandbox_id: str) -> None: ...
    def delete(self, sandbox_id: str) -> None: ...
    def exists(self, sandbox_id: str) -> bool: ...
    def close(self) -> None: ...


class SdkDriver:
    def __init__(self, cp: ControlPlane) -> None:
        self.client = Client(cp.grpc_target, token=TOKEN)

    def create(self, kind: str) -> str:
        return self.client.create(kind=kind).id

    def exec(self, sandbox_id: str, cmd: str, *, keep_background: bool = False) -> tuple[int, str]:
        result = self.client.get(sandbox_id).exec(cmd, keep_background=keep_background)
        return result.exit_code or 0, result.stdout

    def step(self, sandbox_id: str, action: dict[str, Any]) -> None:
        self.client.get(sandbox_id).step(action)

    def screenshot(self, sandbox_id: str) -> bytes:
        shot = self.client.get(sandbox_id).observe().screenshot
        assert shot is not None
        return shot.data

    def reset(self, sandbox_id: str) -> None:
        self.client.get(sandbox_id).reset()

    def delete(self, sandbox_id: str) -> None:
        self.client.get(sandbox_id).close()

    def exists(self, sandbox_id: str) -> bool:
        try:
            self.client.get(sandbox_id)
        except NotFound:
            return False
        return True

    def close(self) -> None:
        self.client.close()


class RestDriver:
    def __init__(self, cp: ControlPlane) -> None:
        self.http = httpx.Client(base_url=cp.http_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)

    def _ok(self, response: httpx.Response) -> httpx.Response:
        assert response.status_code < 300, response.text
        return response

    def create(self, kind: str) -> str:
        return str(self._ok(self.http.post("/v1/sandboxes", json={"kind": kind})).json()["id"])

    def exec(self, sandbox_id: str, cmd: str, *, keep_background: bool = False) -> tuple[int, str]:
        body = {"cmd": cmd, "keep_background": keep_background}
        result = self._ok(self.http.post(f"/v1/sandboxes/{sandbox_id}/exec", json=body)).json()
        return result["exit_code"] or 0, result["stdout"]

    def step(self, sandbox_id: str, action: dict[str, Any]) -> None:
        self._ok(self.http.post(f"/v1/sandboxes/{sandbox_id}/step", json={"action": action}))

    def screenshot(self, sandbox_id: str) -> bytes:
        response = self._ok(self.http.get(f"/v1/sandboxes/{sandbox_id}/screenshot"))
        assert response.headers["content-type"] == "image/png"
        return response.content

    def reset(self, sandbox_id: str) -> None:
        self._ok(self.http.post(f"/v1/sandboxes/{sandbox_id}/reset"))

    def delete(self, sandbox_id: str) -> None:
        self._ok(self.http.delete(f"/v1/sandboxes/{sandbox_id}"))

    def exists(self, sandbox_id: str) -> bool:
        return self.http.get(f"/v1/sandboxes/{sandbox_id}").status_code == 200

    def close(self) -> None:
        self.http.close()


class CliDriver:
    def __init__(self, cp: ControlPlane, tmp: Path) -> None:
        self.env = cp.env
        self.tmp = tmp

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([SANDBOX_BIN, *args], env=self.env, capture_output=True, text=True, timeout=180)
        if check:
            assert done.returncode == 0, f"sandbox {' '.join(args)}: {done.stderr}"
        return done

    def create(self, kind: str) -> str:
        return self._run("create", kind).stdout.strip()

    def exec(self, sandbox_id: str, cmd: str, *, keep_background: bool = False) -> tuple[int, str]:
        if keep_background:  # the CLI runs commands in a session, where background jobs live on
            done = self._run("exec", sandbox_id, "--session", "bg", "--", cmd, check=False)
        else:
            done = self._run("exec", sandbox_id, "--", "bash", "-c", cmd, check=False)
        return done.returncode, done.stdout

    def step(self, sandbox_id: str, action: dict[str, Any]) -> None:
        self._run("step", sandbox_id, json.dumps(action))

    def screenshot(self, sandbox_id: str) -> bytes:
        out = self.tmp / f"{sandbox_id}.png"
        self._run("shot", sandbox_id, "-o", str(out))
        return out.read_bytes()

    def reset(self, sandbox_id: str) -> None:
        self._run("reset", sandbox_id)

    def delete(self, sandbox_id: str) -> None:
        self._run("rm", sandbox_id)

    def exists(self, sandbox_id: str) -> bool:
        return sandbox_id in self._run("ls").stdout

    def close(self) -> None:
        pass


@pytest.mark.parametrize("skin", ["grpc-sdk", "rest", "cli"])
def test_desktop_scenario(control_plane: ControlPlane, skin: str, tmp_path: Path) -> None:
    driver: Driver
    if skin == "grpc-sdk":
        driver = SdkDriver(control_plane)
    elif skin == "rest":
        driver = RestDriver(control_plane)
    else:
        driver = CliDriver(control_plane, tmp_path)

    sandbox_id = driver.create("desktop")
    try:
        code, _ = driver.exec(
            sandbox_id,
            "xterm -T typing -geometry 60x10+0+0 -e sh -c 'cat > /workspace/typed.txt' >/dev/null 2>&1 &",
            keep_background=True,
        )
        assert code == 0
        for _ in range(100):
            if driver.exec(sandbox_id, "xdotool search --onlyvisible --name '^typing$'")[0] == 0:
                break
            time.sleep(0.1)
        before = driver.screenshot(sandbox_id)
        driver.step(sandbox_id, {"type": "click", "x": 100, "y": 60})
        driver.step(sandbox_id, {"type": "type_text", "text": "hello from " + skin + "\n"})
        typed = ""
        for _ in range(50):
            typed = driver.exec(sandbox_id, "cat /workspace/typed.txt")[1]
            if typed:
                break
            time.sleep(0.1)
        assert typed == f"hello from {skin}\n"
        after = driver.screenshot(sandbox_id)
        assert Image.open(io.BytesIO(after)).size == (1280, 800)
        assert before != after, "the screen must show the typing"

        driver.reset(sandbox_id)
        code, _ = driver.exec(sandbox_id, "test -e /workspace/typed.txt")
        assert code != 0, "reset must give a fresh /workspace"
    finally:
        driver.delete(sandbox_id)
    try:
        assert not driver.exists(sandbox_id)
    finally:
        driver.close()


def test_a_zstd_screenshot_through_the_sdk_and_rest_shows_the_pngs_pixels(control_plane: ControlPlane) -> None:
    """The whole way (agent, control plane, gRPC or REST, SDK): a zstd screenshot decodes to the PNG's picture."""
    with Client(control_plane.grpc_target, token=TOKEN) as client, client.create(kind="desktop") as sb:
        sb.exec(
            "xterm -geometry 60x10+40+40 -e sh -c 'ls -l /usr/bin; exec sleep 1000' >/dev/null 2>&1 &",
            keep_background=True,
        )
        for _ in range(100):
            if sb.exec("xdotool search --onlyvisible --class xterm").exit_code == 0:
                break
            time.sleep(0.1)
        time.sleep(0.5)  # its text drawn
        for _ in range(3):  # the panel's clock may tick between two screenshots: then again
            png, shot = sb.observe().screenshot, sb.observe(format="zstd").screenshot
            assert png is not None and shot is not None
            if shot.image().tobytes() == png.image().tobytes():
                break
        else:
            raise AssertionError("the zstd screenshot never showed the PNG's pixels")
        assert (shot.format, shot.width, shot.height) == ("zstd", 1280, 800)
        assert len(shot.data) < len(png.data), "screen content compresses better than PNG's"
        with httpx.Client(base_url=control_plane.http_url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            raw = http.get(f"/v1/sandboxes/{sb.id}/screenshot", params={"format": "zstd"})
        assert raw.status_code == 200 and raw.headers["content-type"] == "application/zstd"
        assert shot.image().tobytes() == decode(raw.content, "zstd", 1280, 800).tobytes()
        assert raw.headers["x-screen-width"] == "1280"


# ---------------------------------------------------------------------------- load, gym, failures


async def test_200_concurrent_steps_over_10_sandboxes(control_plane: ControlPlane) -> None:
    async with AsyncClient(control_plane.grpc_target, token=TOKEN) as client:
        sandboxes = await asyncio.gather(*(client.create(kind="terminal") for _ in range(10)))
        try:
            steps = [sandboxes[i % 10].step({"type": "exec", "cmd": ["echo", str(i)]}) for i in range(200)]
            observations = await asyncio.gather(*steps)
            outputs = [obs.exec.stdout.strip() if obs.exec else None for obs in observations]
            assert outputs == [str(i) for i in range(200)]
        finally:
            await asyncio.gather(*(sb.close() for sb in sandboxes))


async def test_a_group_is_distinct_containers_made_in_one_call_or_none(control_plane: ControlPlane) -> None:
    async with AsyncClient(control_plane.grpc_target, token=TOKEN) as client:
        before = {info.id for info in await client.list()}
        with pytest.raises(NotFound, match="sandbox images build"):
            await client.create_group(3, "terminal", image="sandbox/does-not-exist:latest")
        assert {info.id for info in await client.list()} == before, "a failed group left sandboxes behind"
        group = await client.create_group(4, "terminal", labels={"t": "group"})
        try:
            assert len({sb.id for sb in group}) == 4
            assert (await group[0].exec("echo mine > /workspace/only-here")).exit_code == 0
            for sb in group[1:]:
                assert (await sb.exec("test -e /workspace/only-here")).exit_code == 1, "a group shares a file system"
        finally:
            await asyncio.gather(*(sb.close() for sb in group))


async def test_a_batch_of_steps_runs_each_in_its_own_container(control_plane: ControlPlane) -> None:
    async with AsyncClient(control_plane.grpc_target, token=TOKEN) as client:
        group = await client.create_group(3, "terminal", labels={"t": "batch"})
        try:
            for sb in group:
                await sb.files.write("/workspace/who", sb.id)
            gone = group.pop()
            await gone.close()
            outcomes = await client.step_many(
                [(sb, {"type": "exec", "cmd": "cat /workspace/who"}) for sb in group] + [(gone.id, "WAIT")]
            )
            assert [o.exec.stdout for o in outcomes[:2] if isinstance(o, Observation) and o.exec] == [
                sb.id for sb in group
            ]
            assert isinstance(outcomes[2], FailedPrecondition | NotFound), outcomes[2]
        finally:
            await asyncio.gather(*(sb.close() for sb in group))


def test_a_group_from_the_sync_client_and_the_cli(control_plane: ControlPlane) -> None:
    with Client(control_plane.grpc_target, token=TOKEN) as sync:
        pair = sync.create_group(2, "terminal")
        try:
            assert [sb.exec("echo ok").stdout for sb in pair] == ["ok\n", "ok\n"]
        finally:
            for sb in pair:
                sb.close()
        made = subprocess.run(
            [SANDBOX_BIN, "create", "terminal", "--count", "3"], env=control_plane.env, capture_output=True, text=True
        )
        ids = made.stdout.split()
        try:
            assert made.returncode == 0 and len(set(ids)) == 3, made.stderr
            assert {info.id for info in sync.list()} >= set(ids)
        finally:
            for sandbox_id in ids:
                sync.get(sandbox_id).close()


def test_gym_env_runs_an_episode_on_a_terminal_sandbox(control_plane: ControlPlane) -> None:
    with Client(control_plane.grpc_target, token=TOKEN) as client:
        env = SandboxEnv(
            "terminal",
            client=client,
            reward_fn=lambda sandbox, action, obs: 1.0 if obs.exec and "42" in obs.exec.stdout else 0.0,
            max_steps=3,
        )
        try:
            env.reset()
            total, steps, truncated = 0.0, 0, False
            for cmd in ("echo 6", "echo $((6*7))", "echo done"):
                _obs, reward, terminated, truncated, _info = env.step({"type": "exec", "cmd": cmd})
                total += reward
                steps += 1
                if terminated or truncated:
                    break
            assert total == 1.0 and steps == 3 and truncated
        finally:
            env.close()


def test_tenants_and_a_dead_sandbox(control_plane: ControlPlane, backend: Any) -> None:
    with (
        Client(control_plane.grpc_target, token=TOKEN) as alpha,
        Client(control_plane.grpc_target, token=OTHER_TOKEN) as beta,
    ):
        sandbox = alpha.create(kind="terminal")
        try:
            with pytest.raises(NotFound):
                beta.get(sandbox.id)
            assert sandbox.id not in {s.id for s in beta.list()}
            # The public id names a lease; the container behind it is the instance the agent reports.
            observed = sandbox.step({"type": "exec", "cmd": "printf %s $SANDBOX_INSTANCE_ID"})
            assert observed.exec is not None
            instance = observed.exec.stdout.strip()
            backend.client.containers.get(backend.container_name(instance)).kill()
            with pytest.raises(FailedPrecondition, match="exited"):
                sandbox.step({"type": "exec", "cmd": "true"})
        finally:
            sandbox.close()


def test_the_cli_starts_a_program_in_the_background_that_outlives_the_call(control_plane: ControlPlane) -> None:
    with Client(control_plane.grpc_target, token=TOKEN) as client, client.create("terminal") as sb:
        run = [SANDBOX_BIN, "exec", sb.id, "--background", "--", "sleep", "300"]
        started = subprocess.run(run, env=control_plane.env, capture_output=True, text=True, timeout=60)
        assert started.returncode == 0, started.stderr
        pid = started.stdout.strip()
        assert pid.isdigit(), started.stdout
        alive = sb.exec(f"kill -0 {pid} && tr '\\0' ' ' </proc/{pid}/cmdline")
        assert alive.exit_code == 0 and alive.stdout.strip() == "sleep 300", alive
