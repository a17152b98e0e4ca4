"""The REST API keeps its own contract: schemathesis, every check on, runs each phase (examples, coverage, fuzzing,
stateful) against ``/openapi.json`` of the in-process app over the fake backend, and must find nothing.

Schemathesis serves an ASGI app from an event loop of its own (in a thread), so the service is made there too: the
app below builds it when that loop starts it (the ASGI lifespan) and closes it when the loop stops it. Every sandbox
a generated request creates is deleted again (the oldest ones while the run goes on, the rest at its end), so the run
never holds more than a few agent processes.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from schemathesis.engine import events
from schemathesis.engine.recorder import ScenarioRecorder
from schemathesis.python import asgi

from sandbox.api.rest import create_app
from sandbox.capacity.settings import CapacitySettings
from sandbox.service import SandboxService, TokenRegistry
from sandbox.store import EmbeddedStore
from sandbox.testing.fake_backend import FakeBackend, FakeConfig
from tests.unit.conftest import ALPHA, ALPHA_TOKEN, TOKENS

MAX_EXAMPLES = 15
"""Examples an operation, per generating phase (as ``st run --max-examples 15``)."""
SEED = 20240611
"""A fixed seed, and derandomized generation: the same requests on every run."""
LIVE_SANDBOXES = 3
"""At most this many sandboxes a generated request created are kept (stateful tests use the newest ones)."""
GROUP = "/v1/sandboxes:group"
HOST_MEMORY_MB = 1224
"""The fake host's memory: with the default capacity settings (1 GiB kept for the host), room for 6 terminals, 1
desktop and no browser. Every surface that starts instances goes through admission, so a generated group of 1024
is refused (429) with nothing started, and the run never starts more than that (each an agent process, 13 MiB)."""
MAX_WAIT_S = 0.5
"""Generated creates ask to wait up to a day; the server cuts every wait to this (its ``max_wait_s``)."""
MAX_RUN_S = 120.0
ACCEPTANCE = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]
"""What schemathesis takes for "accepted" from a request the schema allows (its default)."""
CHECKED_BEYOND_THE_SCHEMA = {
    "step_v1_sandboxes__sandbox_id__step_post": "a pyautogui action's code must parse as the calls the translator "
    "knows (Python source: no JSON Schema states that); an exec action has exec's rules (below)",
    "exec_command_v1_sandboxes__sandbox_id__exec_post": "argv[0] must be a program the sandbox can start, and a "
    "session takes cmd as shell text, not an argv list (TODO: state the second with if/then)",
    "reset_sandbox_v1_sandboxes__sandbox_id__reset_post": "a task is checked against what this server can run "
    "(known evaluator metrics and getters, its fixtures present), beyond its shape",
}
"""The operations whose input has rules no JSON Schema can state: a 422 from them, for a request the schema allows,
is the server doing its job. Every other operation must accept what its schema allows."""
ANSWERED_PER_ITEM = {"POST /v1/sandboxes:step": "step_many_v1_sandboxes_step_post"}
"""Operations (label: id) that answer a part of the input the schema refuses in a successful reply, item by item: a
batch answers a step whose action breaks a rule checked where the step is done (an exec's empty argv: the agent's)
in that step's result, 200 for the call, as it answers every step that fails (what the models refuse, it refuses for
the whole batch: 422). Schemathesis's negative-data check does not apply to them; the positive one takes a 422, as
for the operations above (each step's action has the single step's rules)."""
LOGGER = logging.getLogger("sandbox.test.contract")

Message = dict[str, Any]


class HostedApp:
    """The REST app as an ASGI app that makes its service (store, fake backend) when its lifespan starts, in the
    event loop that serves it, and closes it when the lifespan ends."""

    def __init__(self, socket_root: str) -> None:
        self.socket_root = socket_root
        self.service: SandboxService | None = None
        self.app: Any = None

    async def __call__(self, scope: Message, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self._start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _start(self) -> None:
        self.store = await EmbeddedStore.open(None, logger=LOGGER)
        self.backend = FakeBackend(FakeConfig(socket_root=self.socket_root, host_memory_mb=HOST_MEMORY_MB))
        capacity = CapacitySettings(max_wait_s=MAX_WAIT_S)
        self.service = SandboxService(self.backend, self.store, logger=LOGGER, capacity=capacity)
        await self.service.start()
        self.app = create_app(self.service, TokenRegistry.from_mapping(TOKENS), logger=LOGGER)

    async def _stop(self) -> None:
        assert self.service is not None
        principals = TokenRegistry.from_mapping(TOKENS)
        for token in TOKENS:
            principal = principals.authenticate(token)
            for info in await self.service.list_sandboxes(principal):
                await self.service.delete(principal, info.id)
        await self.service.close()
        await self.backend.close()
        await self.store.close()


class SandboxReaper:
    """Deletes all but the newest ``LIVE_SANDBOXES`` sandboxes generated requests created, as they are created."""

    def __init__(self, app: HostedApp) -> None:
        self.app = app
        self.live: list[str] = []
        self.created = 0

    def after_call(self, context: Any, case: Any, response: Any) -> None:
        if case.method.upper() != "POST" or response.status_code != 201:
            return
        if case.path == "/v1/sandboxes":
            made = [response.json()["id"]]
        elif case.path == GROUP:
            made = [info["id"] for info in response.json()["sandboxes"]]
        else:
            return
        self.created += len(made)
        self.live += made
        with asgi.get_client(self.app) as client:
            while len(self.live) > LIVE_SANDBOXES:
                client.delete(f"/v1/sandboxes/{self.live.pop(0)}", headers=ALPHA)


@pytest.fixture(scope="module")
def hosted() -> Iterator[HostedApp]:
    root = tempfile.mkdtemp(prefix="sbxc-", dir="/tmp")
    app = HostedApp(root)
    try:
        yield app
    finally:
        try:
            asgi.shutdown_lifespans()  # deletes what is left, closes the service (see HostedApp._stop)
        finally:
            leftovers = os.listdir(root)
            shutil.rmtree(root, ignore_errors=True)
        assert not leftovers, f"sandboxes left behind: {leftovers}"


def _failures(recorder: ScenarioRecorder, found: dict[tuple[str, str, str], str]) -> None:
    for checks in recorder.checks.values():
        for check in checks:
            info = check.failure_info
            if info is None:
                continue
            if check.name == "negative_data_rejection" and recorder.label in ANSWERED_PER_ITEM:
                continue
            failure = info.failure
            key = (recorder.label, check.name, failure.title)
            found.setdefault(key, f"{failure.message.strip()}\n    {info.code_sample}")


def test_rest_api_keeps_its_contract(hosted: HostedApp) -> None:
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "workers": 1,
            "auth": {"openapi": {"HTTPBearer": {"bearer": ALPHA_TOKEN}}},
            "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none"},
            "operations": [
                {
                    "include-operation-id": list(CHECKED_BEYOND_THE_SCHEMA),
                    "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTANCE, "422"]}},
                },
                {
                    "include-operation-id": list(ANSWERED_PER_ITEM.values()),
                    "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTANCE, "422"]}},
                },
            ],
        }
    )
    config.projects.override.checks.update(included_check_names=["all"])
    schema = schemathesis.openapi.from_asgi("/openapi.json", hosted, config=config)
    reaper = SandboxReaper(hosted)
    schema.hooks.register_hook_with_name(reaper.after_call, "after_call")

    started = time.monotonic()
    found: dict[tuple[str, str, str], str] = {}
    errors: list[str] = []
    scenarios = 0
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            scenarios += 1
            _failures(event.recorder, found)
        elif isinstance(event, events.NonFatalError):
            errors.append(f"{event.label}: {event.info.title}: {event.info.message}")
        elif isinstance(event, events.FatalError):
            errors.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.EngineFinished):
            errors.extend(f"after run: {f.title}: {f.message}" for f in event.failures)
    elapsed = time.monotonic() - started
    print(f"schemathesis: {scenarios} scenarios, {reaper.created} sandboxes created, {elapsed:.1f} s")

    report = "\n".join(f"- {label} [{check}] {title}: {message}" for (label, check, title), message in found.items())
    assert scenarios > 0 and reaper.created > 0, "schemathesis tested nothing (or never made a sandbox)"
    assert not errors, "schemathesis could not test everything:\n" + "\n".join(errors)
    assert not found, f"{len(found)} unique contract failures:\n{report}"
    assert hosted.service is not None
    model = hosted.service.admission.model
    allocatable, surge = model.allocatable, model.surge
    assert allocatable is not None and surge is not None, "the contract server ran without a capacity model"
    peak = hosted.service.admission.ledger.peak
    assert peak.memory_mb > 0, "no instance was ever counted"
    assert peak.fits_in(allocatable + surge), f"started more than capacity: {peak} of {allocatable}"
    assert elapsed < MAX_RUN_S
