"""Direct lanes (docs/lanes.md): steps from the SDK to the sandbox's agent, with the control plane out of the path.

``sb.lane()`` gives a :class:`Lane` (``AsyncLane`` for the async client) with the ``step`` and ``observe`` of a
``StepStream``. It asks the control plane for a lane once (``OpenLane``: the caller's token and tenancy are checked
there, and the agent is granted a ticket), then speaks the agent's own protocol: one frame a step, no gRPC and no
third process. The control plane reads what each step did from the agent a second later, so its metrics, the recent
actions, the output tail and the idle clock see every step.

What a lane does not carry goes to the control plane as ``sb.step`` would, with the same result: actions outside the
lane's list (pages, navigation, pyautogui, done/fail), every step while the sandbox runs an episode (the control plane
refuses lanes then: it counts, records and scores an episode's steps), and a browser's observe (its page's address).

When the lane's agent is gone before a step is sent (a reset swapped the instance, a recovery replaced it) or its
ticket was revoked or expired, the lane opens again and the step goes there: nothing had been done. A lane that
cannot be reached twice in a row (a client on another host than a Docker control plane) leaves the step to the
control plane, and is asked for again after ``REOPEN_AFTER_S``. When the
connection breaks after the step was sent, whether it happened is unknown: the lane asks the control plane for the
sandbox's health (which replaces a broken one) and raises ``Unavailable``, as a step through the control plane would.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import time
from collections.abc import Mapping
from typing import Any, Protocol

from sandbox import models
from sandbox.errors import DeadlineExceeded, FailedPrecondition, SandboxError, Unavailable
from sandbox.models import Action, ExecResult, Health, LaneInfo, Observation, SandboxInfo, SandboxKind, Screenshot
from sandbox.protocol import HELLO_OP, LANE_STEP_OP, ErrorCode, FrameError, encode_frame, read_frame, recv_frame
from sandbox.wire import convert
from sandbox.wire.limits import agent_deadline
from sandbox.wire.status import from_agent


class _Handle(Protocol):
    """What a lane needs of its sandbox's handle (``Sandbox``): its id and kind, the calls a lane falls back on."""

    @property
    def id(self) -> str: ...

    info: SandboxInfo

    def step(self, action: Action, *, screenshot: bool = False) -> Observation: ...

    def observe(self, *, format: str = "png", quality: int = 80) -> Observation: ...

    def health(self) -> Health: ...

    def _open_lane(self) -> LaneInfo: ...


class _AsyncHandle(Protocol):
    """``_Handle`` of the async client (``AsyncSandbox``)."""

    @property
    def id(self) -> str: ...

    info: SandboxInfo

    async def step(self, action: Action, *, screenshot: bool = False) -> Observation: ...

    async def observe(self, *, format: str = "png", quality: int = 80) -> Observation: ...

    async def health(self) -> Health: ...

    async def _open_lane(self) -> LaneInfo: ...


REOPEN_AFTER_S = 10.0
"""While the control plane refuses a lane (an episode runs) or a lane cannot be reached, steps go through the
control plane; a lane is asked for again after this."""
RENEW_BEFORE_S = 30.0
"""A lane this close to its expiry is opened again before the next step."""
CONNECT_TIMEOUT_S = 3.0
ACT_DEADLINE_S = 70.0


class _Stale(Exception):
    """Nothing was done: the lane's agent was gone before the step was sent, or its ticket no longer holds."""


# ---------------------------------------------------------------------------------------------- sans-I/O


def parse_address(address: str) -> tuple[str, str, int]:
    """``unix:PATH`` -> ("unix", path, 0); ``tcp:HOST:PORT`` -> ("tcp", host, port)."""
    scheme, _, rest = address.partition(":")
    if scheme == "unix" and rest:
        return "unix", rest, 0
    host, _, port = rest.rpartition(":")
    if scheme == "tcp" and host and port.isdigit():
        return "tcp", host.strip("[]"), int(port)
    raise Unavailable(f"the control plane gave a lane address this SDK cannot use: {address!r}")


def hello_frame(ticket: str) -> bytes:
    return encode_frame({"op": HELLO_OP, "args": {"lane": ticket}, "deadline": CONNECT_TIMEOUT_S})


def request_frame(action: Action | None, screenshot: dict[str, Any] | None) -> tuple[bytes, float]:
    """The ``lane_step`` frame of ``action`` (and a screenshot after it), and how long to wait for its answer."""
    args: dict[str, Any] = {}
    deadline = 10.0
    if action is not None:
        args["action"] = action.model_dump(mode="json", exclude_none=True)
        if isinstance(action, models.Exec):
            deadline = action.timeout + 10
        elif isinstance(action, models.Wait):
            deadline = action.seconds + ACT_DEADLINE_S
        else:
            deadline = ACT_DEADLINE_S
    if screenshot is not None:
        args["screenshot"] = screenshot
    return encode_frame({"op": LANE_STEP_OP, "args": args, "deadline": deadline}), agent_deadline(deadline)


def observation(header: dict[str, Any], blob: bytes, started: float) -> Observation:
    """The observation a ``lane_step`` answer carries; the agent's error as the platform's exception."""
    if not header.get("ok"):
        error = header.get("error") or {}
        code, message = str(error.get("code")), str(error.get("message", "the agent gave no reason"))
        if code == ErrorCode.UNAUTHENTICATED:
            raise _Stale(message)
        raise from_agent(code, message)
    result = header.get("result") or {}
    shot = result.get("screenshot")
    end = shot["offset"] if shot else len(blob)
    obs: dict[str, Any] = {}
    ran = result.get("exec")
    if ran is not None:
        split = int(ran["stdout_bytes"])
        obs["exec"] = ExecResult.from_agent(ran, blob[:split], blob[split:end])
    if "cursor" in result:
        obs["cursor"] = tuple(result["cursor"])
    timings = {"action": float(result.get("action_ms", 0.0))}
    if shot:
        obs["screenshot"] = Screenshot(
            data=blob[end:], width=shot["width"], height=shot["height"], format=shot["format"]
        )
    timings["total"] = round((time.perf_counter() - started) * 1000, 3)
    return Observation(**obs, timings_ms=timings)


class _Policy:
    """What goes through the lane and when to ask for one: the state both lanes share."""

    def __init__(self, kind: SandboxKind) -> None:
        self.kind = kind
        self.info: LaneInfo | None = None
        self.refused_until = 0.0

    def wants_open(self) -> bool:
        """Whether a lane should be asked for before this step."""
        if self.info is not None:
            return self.info.expires_at - time.time() < RENEW_BEFORE_S
        return time.monotonic() >= self.refused_until

    def refused(self) -> None:
        self.info = None
        self.refused_until = time.monotonic() + REOPEN_AFTER_S

    def carries(self, action: Action | None) -> bool:
        if self.info is None:
            return False
        if action is None:  # an observe: a screen, and for a browser its page's address, which only the CP gives
            return self.kind.has_display and self.kind is not SandboxKind.BROWSER
        return action.type in self.info.actions


def _screenshot_args(screenshot: bool, format: str = "png", quality: int = 80) -> dict[str, Any] | None:
    return {"format": format, "quality": quality} if screenshot else None


def _stale_socket(sock: socket.socket) -> bool:
    """Whether an idle connection has something to read: its agent closed it (or sent what nobody asked for)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


# ---------------------------------------------------------------------------------------------- sync


class Lane:
    """Steps of one sandbox over a direct lane; ``with sb.lane() as lane: lane.step(...)``. One step at a time."""

    def __init__(self, sandbox: _Handle) -> None:
        self._sandbox = sandbox
        self._policy = _Policy(sandbox.info.kind)
        self._sock: socket.socket | None = None

    @property
    def info(self) -> LaneInfo | None:
        """The lane as the control plane granted it (None while steps go through the control plane)."""
        return self._policy.info

    def step(self, action: Action | Mapping[str, Any] | str, *, screenshot: bool = False) -> Observation:
        checked = convert.validate_action(action)
        obs = self._through_lane(checked, _screenshot_args(screenshot))
        return obs if obs is not None else self._sandbox.step(checked, screenshot=screenshot)

    def observe(self, *, format: str = "png", quality: int = 80) -> Observation:
        obs = self._through_lane(None, _screenshot_args(True, format, quality))
        return obs if obs is not None else self._sandbox.observe(format=format, quality=quality)

    def close(self) -> None:
        self._drop()

    def __enter__(self) -> Lane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _through_lane(self, action: Action | None, screenshot: dict[str, Any] | None) -> Observation | None:
        """The step's observation over the lane; None: the lane does not carry it."""
        self._ensure_open()
        if not self._policy.carries(action):
            return None
        frame, deadline = request_frame(action, screenshot)
        for attempt in range(2):
            try:
                return self._exchange(frame, deadline)
            except _Stale:
                self._drop()
                if attempt:  # unreachable from here (another host?): nothing was sent, the API takes it
                    self._policy.refused()
                    return None
                self._open()
                if not self._policy.carries(action):
                    return None
        raise AssertionError("unreachable")

    def _exchange(self, frame: bytes, deadline: float) -> Observation:
        sock = self._connected()
        started = time.perf_counter()
        try:
            sock.settimeout(deadline)
            sock.sendall(frame)
            header, blob = recv_frame(sock)
        except TimeoutError as e:
            self._drop()
            raise _no_answer(self._sandbox.id, deadline) from e
        except (OSError, FrameError) as e:
            self._drop()
            with contextlib.suppress(SandboxError):
                self._sandbox.health()  # the control plane looks, and replaces a broken sandbox
            raise _lost(self._sandbox.id, e) from e
        return observation(header, blob, started)

    def _connected(self) -> socket.socket:
        """The lane's connection, opened (with its hello) if there is none or its agent closed it."""
        if self._sock is not None and not _stale_socket(self._sock):
            return self._sock
        self._drop()
        info = self._policy.info
        assert info is not None
        scheme, host, port = parse_address(info.address)
        if scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        else:
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.settimeout(CONNECT_TIMEOUT_S)
            sock.connect(host if scheme == "unix" else (host, port))
            sock.sendall(hello_frame(info.ticket))
            answer, _ = recv_frame(sock)
        except (OSError, FrameError) as e:
            sock.close()
            raise _Stale(f"cannot reach the lane at {info.address}: {e}") from e
        if not answer.get("ok"):
            sock.close()
            raise _Stale(str((answer.get("error") or {}).get("message", "the lane refused its ticket")))
        self._sock = sock
        return sock

    def _ensure_open(self) -> None:
        if self._policy.wants_open():
            self._open()

    def _open(self) -> None:
        try:
            self._policy.info = self._sandbox._open_lane()
        except FailedPrecondition:
            self._policy.refused()

    def _drop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None


# ---------------------------------------------------------------------------------------------- async


class AsyncLane:
    """``Lane`` for the async client: ``async with sb.lane() as lane: await lane.step(...)``."""

    def __init__(self, sandbox: _AsyncHandle) -> None:
        self._sandbox = sandbox
        self._policy = _Policy(sandbox.info.kind)
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._lock = asyncio.Lock()

    @property
    def info(self) -> LaneInfo | None:
        """The lane as the control plane granted it (None while steps go through the control plane)."""
        return self._policy.info

    async def step(self, action: Action | Mapping[str, Any] | str, *, screenshot: bool = False) -> Observation:
        checked = convert.validate_action(action)
        obs = await self._through_lane(checked, _screenshot_args(screenshot))
        return obs if obs is not None else await self._sandbox.step(checked, screenshot=screenshot)

    async def observe(self, *, format: str = "png", quality: int = 80) -> Observation:
        obs = await self._through_lane(None, _screenshot_args(True, format, quality))
        return obs if obs is not None else await self._sandbox.observe(format=format, quality=quality)

    async def close(self) -> None:
        self._drop()

    async def __aenter__(self) -> AsyncLane:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _through_lane(self, action: Action | None, screenshot: dict[str, Any] | None) -> Observation | None:
        async with self._lock:  # one step in flight: answers pair with requests in order
            if self._policy.wants_open():
                await self._open()
            if not self._policy.carries(action):
                return None
            frame, deadline = request_frame(action, screenshot)
            for attempt in range(2):
                try:
                    return await self._exchange(frame, deadline)
                except _Stale:
                    self._drop()
                    if attempt:  # unreachable from here (another host?): nothing was sent, the API takes it
                        self._policy.refused()
                        return None
                    await self._open()
                    if not self._policy.carries(action):
                        return None
            raise AssertionError("unreachable")

    async def _exchange(self, frame: bytes, deadline: float) -> Observation:
        reader, writer = await self._connected()
        started = time.perf_counter()
        try:
            writer.write(frame)
            async with asyncio.timeout(deadline):
                header, blob = await read_frame(reader)
        except TimeoutError as e:
            self._drop()
            raise _no_answer(self._sandbox.id, deadline) from e
        except (OSError, asyncio.IncompleteReadError, FrameError) as e:
            self._drop()
            with contextlib.suppress(SandboxError):
                await self._sandbox.health()
            raise _lost(self._sandbox.id, e) from e
        except BaseException:
            self._drop()  # cancelled midway: which answer comes next is unknown
            raise
        return observation(header, blob, started)

    async def _connected(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._conn is not None:
            reader, writer = self._conn
            sock = writer.get_extra_info("socket")
            if not writer.is_closing() and not reader.at_eof() and sock is not None and not _stale_socket(sock):
                return self._conn
        self._drop()
        info = self._policy.info
        assert info is not None
        scheme, host, port = parse_address(info.address)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                if scheme == "unix":
                    reader, writer = await asyncio.open_unix_connection(host, limit=1 << 20)
                else:
                    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        except (OSError, TimeoutError) as e:
            raise _Stale(f"cannot reach the lane at {info.address}: {e!r}") from e
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                writer.write(hello_frame(info.ticket))
                answer, _ = await read_frame(reader)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, FrameError) as e:
            writer.close()
            raise _Stale(f"the lane at {info.address} hung up on its hello: {e!r}") from e
        if not answer.get("ok"):
            writer.close()
            raise _Stale(str((answer.get("error") or {}).get("message", "the lane refused its ticket")))
        self._conn = reader, writer
        return self._conn

    async def _open(self) -> None:
        try:
            self._policy.info = await self._sandbox._open_lane()
        except FailedPrecondition:
            self._policy.refused()

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None


def _no_answer(sandbox_id: str, deadline: float) -> DeadlineExceeded:
    return DeadlineExceeded(f"the lane to sandbox {sandbox_id} gave no answer within {deadline:g} s")


def _lost(sandbox_id: str, e: BaseException) -> Unavailable:
    return Unavailable(f"lost the lane to sandbox {sandbox_id} during a step (it may have run): {e!r}")
