"""Screen recordings of android episodes, end to end in-process: ``reset(task, record=True)`` through the SDK (gRPC)
-> the service -> the fake backend, whose android instance is the real agent (``--kind android``) running Debian's
real ``adb`` client against a fake adb server; the fake device's ``screenrecord`` makes an MP4 each time. The MP4 is
kept with the episode's trajectory at its end (DONE, a reset), in segments before screenrecord's 180 s limit, and read
back over gRPC, REST and the CLI by its owner only; ``record`` elsewhere is refused; a recording lost at its stop
leaves the episode as it was and says so in the trajectory, the log and the metrics."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.client import AsyncClient, AsyncSandbox
from sandbox.errors import FailedPrecondition, NotFound
from sandbox.models.android import Tap
from sandbox.service import SandboxService
from sandbox.tasks import Task
from tests.polling import eventually
from tests.unit.android.test_api import TASK_FILE, Device, android_env
from tests.unit.android_fakes import FakeAdbServer, FakeConsole
from tests.unit.conftest import ALPHA, ALPHA_TOKEN, BETA, BETA_TOKEN
from tests.unit.service.test_episodes import TASK as TERMINAL_TASK

RECORD_TRAJECTORIES = True  # the conftest's service records this module's trajectories to a directory
RECORDING = "/sdcard/sandbox-recording.mp4"
runner = CliRunner()


class RecordingDevice(Device):
    """The phone of test_android_api, whose ``screenrecord`` leaves a new MP4 on the sdcard each time it runs (or,
    ``broken``, an error message where the MP4 should be)."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[bytes] = []
        self.broken = False

    def __call__(self, command: str) -> bytes:
        if command.startswith("screenrecord "):
            self.made.append(b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom" + f"take {len(self.made)}".encode())
            return b""
        if command == f"cat {RECORDING}":
            return f"cat: {RECORDING}: No such file or directory\n".encode() if self.broken else self.made[-1]
        return super().__call__(command)


@pytest_asyncio.fixture(scope="module")
async def device() -> AsyncIterator[tuple[FakeAdbServer, FakeConsole, RecordingDevice]]:
    if shutil.which("adb") is None:  # a missing client fails the test: it is never a reason to skip
        pytest.fail("Debian's adb client is not installed: apt-get install adb (scripts/setup.sh installs it)")
    phone = RecordingDevice()
    server = await FakeAdbServer(reply=phone).start()
    console = await FakeConsole().start()
    yield server, console, phone
    await console.stop()
    await server.stop()


@pytest_asyncio.fixture(scope="module")
async def phone(
    alpha: AsyncClient,
    device: tuple[FakeAdbServer, FakeConsole, RecordingDevice],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[AsyncSandbox]:
    sb = await alpha.create("android", env=android_env(device, tmp_path_factory.mktemp("home")))
    yield sb
    await sb.close()


async def takes(state: RecordingDevice, count: int) -> None:
    """Wait until the fake device has started ``count`` recordings: the agent's record_start starts ``adb shell
    screenrecord`` and answers without waiting for it to reach the device."""
    await eventually(lambda: len(state.made) >= count, 10, f"screenrecord run {count} times")


def recordings(service: SandboxService, outcome: str) -> float:
    value = service.metrics.registry.get_sample_value(
        "sandbox_recordings_total", {"kind": "android", "outcome": outcome}
    )
    return value or 0.0


async def test_a_recorded_episode_keeps_its_screen_with_the_trajectory(
    phone: AsyncSandbox,
    device: tuple[FakeAdbServer, FakeConsole, RecordingDevice],
    service: SandboxService,
    alpha: AsyncClient,
    beta: AsyncClient,
    api: httpx.AsyncClient,
    tmp_path: Path,
    target: str,
) -> None:
    server, _, state = device
    kept_before = recordings(service, "kept")
    since, made = len(server.commands), len(state.made)
    obs = await phone.reset(task=Task.from_file(TASK_FILE), record=True)
    assert obs.info["recording"] is True and obs.screenshot is not None
    await takes(state, made + 1)
    assert f"screenrecord --time-limit 180 --bit-rate 4000000 {RECORDING}" in server.commands[since:]
    await phone.step(Tap(x=3, y=4))
    done = await phone.step("DONE")
    assert done.done and done.info["reason"] == "done"
    assert f"cat {RECORDING}" in server.commands[since:] and f"rm -f {RECORDING}" in server.commands[since:]

    trajectory = await alpha.trajectories.get(obs.info["trajectory_id"])
    (ref,) = trajectory.info.media
    mp4 = state.made[-1]
    assert (ref.sha256, ref.size, ref.content_type) == (hashlib.sha256(mp4).hexdigest(), len(mp4), "video/mp4")
    assert ref.name == "screen-0000.mp4" and trajectory.info.started_at <= ref.started_at
    assert ref.ended_at is not None and ref.started_at <= ref.ended_at <= ref.started_at + 180
    assert trajectory.info.warnings == [] and trajectory.info.done and len(trajectory.steps) == 3
    assert recordings(service, "kept") == kept_before + 1

    assert await alpha.trajectories.media(trajectory.info.id, ref.sha256) == mp4
    r = await api.get(f"/v1/trajectories/{trajectory.info.id}/media/{ref.sha256}", headers=ALPHA)
    assert (r.status_code, r.headers["content-type"], r.content) == (200, "video/mp4", mp4)
    with pytest.raises(NotFound):
        await beta.trajectories.media(trajectory.info.id, ref.sha256)
    assert (await api.get(f"/v1/trajectories/{trajectory.info.id}/media/{ref.sha256}", headers=BETA)).status_code == 404

    env = {"SANDBOX_TARGET": target, "SANDBOX_TOKEN": ALPHA_TOKEN}
    listed = await asyncio.to_thread(runner.invoke, app, ["trajectory", "media", trajectory.info.id], env=env)
    assert listed.exit_code == 0 and f"{ref.sha256}  video/mp4  {len(mp4)} bytes  screen-0000.mp4" in listed.output
    out = tmp_path / "episode.mp4"
    args = ["trajectory", "media", trajectory.info.id, ref.sha256[:10], "-o", str(out)]
    saved = await asyncio.to_thread(runner.invoke, app, args, env=env)
    assert saved.exit_code == 0, saved.output
    assert out.read_bytes() == mp4 and f"{len(mp4)} bytes (video/mp4) to {out}" in saved.output
    shown = await asyncio.to_thread(runner.invoke, app, ["trajectory", "show", trajectory.info.id], env=env)
    assert f"media {ref.sha256}" in shown.output, shown.output
    beta_env = {"SANDBOX_TARGET": target, "SANDBOX_TOKEN": BETA_TOKEN}
    theirs = await asyncio.to_thread(runner.invoke, app, ["trajectory", "media", trajectory.info.id], env=beta_env)
    assert theirs.exit_code == 1 and "no trajectory" in theirs.output


async def test_a_reset_keeps_the_running_recording_and_long_episodes_are_segmented(
    phone: AsyncSandbox,
    device: tuple[FakeAdbServer, FakeConsole, RecordingDevice],
    alpha: AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = device[2]
    task = Task.from_file(TASK_FILE)
    made = len(state.made)
    first = await phone.reset(task=task, record=True)
    await takes(state, made + 1)
    await phone.step(Tap(x=1, y=1))
    second = await phone.reset(task=task, record=True)  # ends the first episode: its recording is kept before
    await takes(state, made + 2)
    kept = (await alpha.trajectories.get(first.info["trajectory_id"])).info
    assert kept.reason == "reset" and [m.sha256 for m in kept.media] == [hashlib.sha256(state.made[made]).hexdigest()]

    # A segment older than RECORD_SEGMENT_S is stopped at the next step and the next one started (screenrecord
    # stops by itself at 180 s): here every step starts a new segment.
    monkeypatch.setattr("sandbox.service.trajectory_ops.RECORD_SEGMENT_S", 0.0)
    await phone.step(Tap(x=2, y=2))
    await takes(state, made + 3)
    await phone.step(Tap(x=3, y=3))
    await takes(state, made + 4)
    await phone.reset()  # a plain reset ends the episode too, and keeps its last segment
    segments = (await alpha.trajectories.get(second.info["trajectory_id"])).info.media
    assert [m.sha256 for m in segments] == [hashlib.sha256(d).hexdigest() for d in state.made[made + 1 :]]
    assert [m.started_at for m in segments] == sorted(m.started_at for m in segments)
    assert all(m.ended_at is not None and m.started_at <= m.ended_at for m in segments)


async def test_a_recording_lost_at_its_stop_leaves_the_episode_fine_and_says_so(
    phone: AsyncSandbox,
    device: tuple[FakeAdbServer, FakeConsole, RecordingDevice],
    service: SandboxService,
    alpha: AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = device[2]
    failed_before = recordings(service, "failed")
    task = Task.from_file(TASK_FILE)

    obs = await phone.reset(task=task, record=True)
    record = await service.records.read(phone.id)
    assert record is not None and record.episode is not None and record.episode.recording_since is not None
    await service.records.agent(record).request("android", {"op": "record_stop"})  # stopped behind the service's back
    done = await phone.step("DONE")
    assert done.done and done.info["reason"] == "done"
    info = (await alpha.trajectories.get(obs.info["trajectory_id"])).info
    assert info.done and info.media == []
    (warning,) = info.warnings
    assert warning.startswith("the screen recording from 0 s into the episode was lost: ")
    assert "no screen recording is running" in warning

    state.broken = True  # screenrecord left no MP4
    try:
        made = len(state.made)
        obs = await phone.reset(task=task, record=True)
        await takes(state, made + 1)
        await phone.step(Tap(x=5, y=5))
        assert (await phone.step("FAIL")).done
    finally:
        state.broken = False
    info = (await alpha.trajectories.get(obs.info["trajectory_id"])).info
    assert info.reason == "fail" and info.media == [] and "record_stop returned no MP4" in info.warnings[0]
    assert recordings(service, "failed") == failed_before + 2
    assert any("was lost" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")

    made = len(state.made)
    obs = await phone.reset(task=task, record=True)  # the next episode records again
    await takes(state, made + 1)
    assert (await phone.step("DONE")).done
    assert len((await alpha.trajectories.get(obs.info["trajectory_id"])).info.media) == 1


async def test_record_is_refused_where_it_cannot_be_kept(
    alpha: AsyncClient, api: httpx.AsyncClient, service: SandboxService
) -> None:
    async with await alpha.create("terminal") as terminal:
        with pytest.raises(FailedPrecondition, match=r"screen recording \(record\) is for android sandboxes only"):
            await terminal.reset(task=TERMINAL_TASK, record=True)
        body = {"task": TERMINAL_TASK, "record": True}
        r = await api.post(f"/v1/sandboxes/{terminal.id}/reset", json=body, headers=ALPHA)
        assert r.status_code == 409 and "android sandboxes only" in r.json()["error"]["message"], r.text
        r = await api.post(f"/v1/sandboxes/{terminal.id}/reset", json={"record": True}, headers=ALPHA)
        assert r.status_code == 422 and "record is for a reset to a task" in r.json()["error"]["message"], r.text
        plain = await terminal.reset(task=TERMINAL_TASK)  # without record: as ever
        assert plain.info["steps"] == 0 and "recording" not in plain.info


async def test_record_without_a_trajectory_store_is_refused(phone: AsyncSandbox, service: SandboxService) -> None:
    kept, service.trajectories = service.trajectories, None
    try:
        with pytest.raises(FailedPrecondition, match="this control plane records none"):
            await phone.reset(task=Task.from_file(TASK_FILE), record=True)
    finally:
        service.trajectories = kept


def test_an_episode_with_no_recording_is_written_as_the_previous_version_reads_it() -> None:
    """During a rolling upgrade a replica of the previous version (no ``recording_since``, unknown fields
    forbidden) still reads every episode record but a recording one."""
    from pydantic import create_model

    from sandbox.service.records import EpisodeRecord

    fields = {n: (f.annotation, f) for n, f in EpisodeRecord.model_fields.items() if n != "recording_since"}
    previous = create_model("PreviousEpisodeRecord", __config__=EpisodeRecord.model_config, **fields)  # type: ignore[call-overload]
    episode = EpisodeRecord(task_id="t", digest="d", task_hash="h", trajectory_id="tr-0123456789abcdef", started_at=1.0)
    assert "recording_since" not in episode.model_dump()
    previous.model_validate(episode.model_dump())
    recording = episode.model_copy(update={"recording_since": 5.0})
    assert EpisodeRecord.model_validate(recording.model_dump()) == recording
