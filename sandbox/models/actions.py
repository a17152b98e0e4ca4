"""The platform's data models. The wire schema is the model: REST bodies, gRPC messages and
SDK arguments are all validated by these classes."""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, StrictBool, field_validator, model_validator

from sandbox.models.android import LongPress, OpenApp, Swipe, Tap
from sandbox.models.base import Button, Coord, Model, _Action
from sandbox.models.rules import (
    COMMAND,
    MOUNT_PATH,
    SNAPSHOT_NAME,
    SYSTEM_DIR,
    VOLUME_NAME,
    EnvName,
    EnvValue,
    keys_must_match,
)

MAX_LEASE_S = 7 * 24 * 3600
"""The longest lease (seconds): the limit of ``SandboxSpec.ttl_s`` and ``idle_timeout_s``, and of a renewal."""
GROUP_MAX = 1024  # the most sandboxes one group create makes


class SandboxKind(enum.StrEnum):
    TERMINAL = "terminal"
    DESKTOP = "desktop"
    BROWSER = "browser"
    ANDROID = "android"

    @property
    def has_display(self) -> bool:
        return self is not SandboxKind.TERMINAL


class NetworkPolicy(enum.StrEnum):
    NONE = "none"
    """No interface but loopback (the default)."""
    INTERNAL = "internal"
    """A private network shared by the platform's sandboxes, with no route outside."""
    EGRESS = "egress"
    """Outbound access through the engine's default bridge. Opt-in only."""


ANDROID_MEMORY_MB = 4096
"""An android sandbox's memory when its spec names none: the emulator's guest RAM, the emulator and adb, with room
(``sandbox.backends.android.MIN_MEMORY_MB`` is the least it boots with)."""


class Resources(Model):
    cpus: float = Field(1.0, gt=0, le=64, description="CPU cores the sandbox may use.")
    memory_mb: int = Field(
        2048, ge=64, le=262_144, description="Memory limit, swap included (android: 4096 when not given)."
    )
    pids: int = Field(512, ge=16, le=65_536, description="Process and thread limit (stops fork bombs).")
    shm_mb: int = Field(256, ge=16, le=16_384, description="Size of /dev/shm (Chromium needs room here).")
    disk_mb: int | None = Field(
        None,
        ge=64,
        le=1_048_576,
        description="Size limit of the sandbox's writable file system; none when omitted. A backend that cannot "
        "enforce it refuses the spec (docs/hardening.md).",
    )


class ScreenSize(Model):
    width: int = Field(1280, ge=320, le=7680)
    height: int = Field(800, ge=200, le=4320)
    depth: Literal[24] = 24


class VolumeMount(Model):
    name: str = Field(
        pattern=VOLUME_NAME, description="Name of a platform volume (1-63 of [a-zA-Z0-9_.-]); created on first use."
    )
    path: str = Field(
        json_schema_extra={"pattern": MOUNT_PATH, "not": {"pattern": SYSTEM_DIR}},
        description="Absolute path inside the sandbox, without '..', and not /proc, /sys or /run/sandbox.",
    )
    read_only: StrictBool = False

    @field_validator("path")
    @classmethod
    def _valid_path(cls, v: str) -> str:
        if not re.fullmatch(MOUNT_PATH, v) or re.fullmatch(SYSTEM_DIR, v):
            raise ValueError("path must be absolute, without '..', and not a system directory")
        return v


class SandboxSpec(Model):
    kind: SandboxKind
    image: str | None = Field(None, description="Image to run; the kind's built image when omitted.")
    resources: Resources = Resources()
    screen: ScreenSize = ScreenSize()
    network: NetworkPolicy = NetworkPolicy.NONE
    volumes: tuple[VolumeMount, ...] = ()
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=64, json_schema_extra=keys_must_match)
    labels: dict[str, str] = Field(
        default_factory=dict, max_length=64, description="Free-form labels, kept with the sandbox."
    )
    snapshot: str | None = Field(
        None,
        pattern=SNAPSHOT_NAME,
        description="Start from this snapshot of the caller's instead of the image (a snapshot's name).",
    )
    ttl_s: float = Field(6 * 3600, gt=0, le=MAX_LEASE_S, description="Lease: deleted this long after creation.")
    idle_timeout_s: float | None = Field(
        1800, gt=0, le=MAX_LEASE_S, description="Lease: deleted after this long with no call on it; None: never."
    )
    auto_recover: StrictBool = Field(False, description="Replace the sandbox when it fails a health check.")

    @model_validator(mode="after")
    def _kind_defaults(self) -> SandboxSpec:
        """An android spec that names no memory gets the emulator's (the common default cannot boot it)."""
        if self.kind is SandboxKind.ANDROID and "memory_mb" not in self.resources.model_fields_set:
            resources = self.resources.model_copy(update={"memory_mb": ANDROID_MEMORY_MB})
            resources.model_fields_set.add("memory_mb")
            object.__setattr__(self, "resources", resources)
        return self


class SandboxState(enum.StrEnum):
    CREATING = "creating"
    RUNNING = "running"
    UNHEALTHY = "unhealthy"
    EXPIRED = "expired"
    DELETED = "deleted"


class SandboxInfo(Model):
    id: str
    tenant: str
    kind: SandboxKind
    state: SandboxState
    spec: SandboxSpec
    created_at: float
    last_active_at: float
    expires_at: float
    error: str | None = None
    replacements: int = Field(0, description="How often a failed sandbox was replaced (auto_recover).")


class SnapshotInfo(Model):
    name: str
    tenant: str
    kind: SandboxKind
    image: str
    source: str = Field(description="The sandbox it was taken from.")
    created_at: float
    warm: int = Field(0, description="Replicas kept running so a reset to it takes no start.")


# --------------------------------------------------------------------------- actions


class Move(_Action):
    type: Literal["move"] = "move"
    x: Coord
    y: Coord


class Click(_Action):
    type: Literal["click"] = "click"
    x: Coord | None = None
    y: Coord | None = None
    button: Button = "left"
    count: int = Field(1, ge=1, le=3)


class DoubleClick(_Action):
    type: Literal["double_click"] = "double_click"
    x: Coord | None = None
    y: Coord | None = None


class RightClick(_Action):
    type: Literal["right_click"] = "right_click"
    x: Coord | None = None
    y: Coord | None = None


class Drag(_Action):
    type: Literal["drag"] = "drag"
    x: Coord
    y: Coord
    to_x: Coord
    to_y: Coord
    button: Button = "left"


class Scroll(_Action):
    type: Literal["scroll"] = "scroll"
    x: Coord | None = None
    y: Coord | None = None
    dx: int = Field(0, ge=-100, le=100)
    dy: int = Field(0, ge=-100, le=100)


class TypeText(_Action):
    type: Literal["type_text"] = "type_text"
    text: str = Field(max_length=100_000)
    interval_ms: int = Field(0, ge=0, le=1000)


class Key(_Action):
    type: Literal["key"] = "key"
    key: str = Field(min_length=1, max_length=64, description='A key or combo: "Return", "ctrl+c".')


class Hotkey(_Action):
    type: Literal["hotkey"] = "hotkey"
    keys: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(min_length=1, max_length=8)


class KeyDown(_Action):
    type: Literal["key_down"] = "key_down"
    key: str = Field(min_length=1, max_length=64)


class KeyUp(_Action):
    type: Literal["key_up"] = "key_up"
    key: str = Field(min_length=1, max_length=64)


class MouseDown(_Action):
    type: Literal["mouse_down"] = "mouse_down"
    button: Button = "left"
    x: Coord | None = None
    y: Coord | None = None


class MouseUp(_Action):
    type: Literal["mouse_up"] = "mouse_up"
    button: Button = "left"
    x: Coord | None = None
    y: Coord | None = None


class Wait(_Action):
    type: Literal["wait"] = "wait"
    seconds: float = Field(ge=0, le=60)


class Exec(_Action):
    type: Literal["exec"] = "exec"
    cmd: str | list[str] = Field(description="A shell command line, or an argv list.", json_schema_extra=COMMAND)
    timeout: float = Field(60.0, gt=0, le=3600)
    cwd: str | None = None
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, json_schema_extra=keys_must_match)
    session: str | None = Field(None, description="Run in this persistent shell session (created on first use).")
    keep_background: StrictBool = Field(
        False, description="Let processes the command started in the background outlive it (one-shot exec only)."
    )


PageId = Annotated[str, Field(min_length=1, max_length=64)]
"""A browser page's id (``page_open`` gives it); an action's ``page`` left None acts in the active page."""


class Navigate(_Action):
    type: Literal["navigate"] = "navigate"
    url: str = Field(min_length=1, max_length=8192)
    timeout: float = Field(30.0, gt=0, le=300)
    page: PageId | None = None


class Evaluate(_Action):
    type: Literal["evaluate"] = "evaluate"
    expression: str = Field(min_length=1, max_length=1_000_000)
    page: PageId | None = None


class PageOpen(_Action):
    """Browser: open ``url`` in a window of its own, one game session per page, with its own clock (``paused``: it
    moves only by ``clock`` steps; ``running`` at ``factor`` times real time; ``none``: real time, no control), input
    and screenshot. ``value``: ``{"page": id, "clock": state, ...}``."""

    type: Literal["page_open"] = "page_open"
    url: str = Field(min_length=1, max_length=8192)
    timeout: float = Field(30.0, gt=0, le=300)
    clock: Literal["running", "paused", "none"] = "running"
    factor: float = Field(1.0, gt=0, le=1000)


class PageClose(_Action):
    """Browser: close a page; ``value``: the pages left."""

    type: Literal["page_close"] = "page_close"
    page: PageId


class Clock(_Action):
    """Browser: a page's clock. ``pause``; ``resume``; ``speed`` (``factor`` times real time); ``step`` by ``ms``
    of page time, running every timer and animation frame due, in order, before it returns (deterministic); ``state``.
    ``value``: ``{"clock": {mode, factor, now_ms, ...}}``."""

    type: Literal["clock"] = "clock"
    op: Literal["pause", "resume", "step", "speed", "state"]
    ms: float | None = Field(None, ge=0, le=86_400_000)
    factor: float | None = Field(None, gt=0, le=1000)
    page: PageId | None = None

    @model_validator(mode="after")
    def _arguments(self) -> Clock:
        missing = {"step": "ms", "speed": "factor"}.get(self.op)
        if missing and getattr(self, missing) is None:
            raise ValueError(f"a clock {self.op} needs {missing}")
        return self


class PageKey(_Action):
    """Browser: press a key (``ArrowUp``, ``Enter``, ``a``, ``ctrl+a``) in a page through CDP, without the X focus."""

    type: Literal["page_key"] = "page_key"
    key: str = Field(min_length=1, max_length=64)
    page: PageId | None = None


class PageClick(_Action):
    """Browser: click at ``x, y`` of a page's viewport (CSS pixels) through CDP."""

    type: Literal["page_click"] = "page_click"
    x: Coord
    y: Coord
    button: Button = "left"
    count: int = Field(1, ge=1, le=3)
    page: PageId | None = None


class Pyautogui(_Action):
    """OSWorld's action space: Python code of ``pyautogui`` calls, translated into computer actions done in order."""

    type: Literal["pyautogui"] = "pyautogui"
    code: str = Field(min_length=1, max_length=100_000)


class Done(_Action):
    """OSWorld's ``DONE``: the agent says the task is done; ends the episode."""

    type: Literal["done"] = "done"


class Fail(_Action):
    """OSWorld's ``FAIL``: the agent says the task cannot be done (an infeasible task scores 1 only on it); ends the
    episode."""

    type: Literal["fail"] = "fail"


OSWORLD_WAIT_S = 1.0
"""OSWorld's ``WAIT``: a pause of this many seconds."""


def _osworld_spelling(value: Any) -> Any:
    """OSWorld agents' outputs as they are: ``"DONE"``, ``"FAIL"``, ``"WAIT"`` (or ``{"type": "DONE"}``), and any
    other string as ``pyautogui`` code."""
    if isinstance(value, str):
        value = {"type": value} if value.strip() in ("DONE", "FAIL", "WAIT") else {"type": "pyautogui", "code": value}
    if isinstance(value, dict) and value.get("type") in ("DONE", "FAIL", "WAIT"):
        value = {**value, "type": str(value["type"]).lower()}
        if value["type"] == "wait":
            value.setdefault("seconds", OSWORLD_WAIT_S)
    return value


PAGE_ACTIONS = (PageOpen, PageClose, Clock, PageKey, PageClick)
"""Pages and clocks; a step of these (or of navigate/evaluate with ``page``) screenshots the page, not the screen."""

COMPUTER_ACTIONS = (
    Move, Click, DoubleClick, RightClick, Drag, Scroll, TypeText, Key, Hotkey, KeyDown, KeyUp, MouseDown, MouseUp, Wait,
)  # fmt: skip

Action = Annotated[
    Move | Click | DoubleClick | RightClick | Drag | Scroll | TypeText | Key | Hotkey | KeyDown | KeyUp | MouseDown
    | MouseUp | Wait | Exec | Navigate | Evaluate | PageOpen | PageClose | Clock | PageKey | PageClick | Pyautogui
    | Done | Fail | Tap | LongPress | Swipe | OpenApp,
    Field(discriminator="type"),
    BeforeValidator(_osworld_spelling),
]  # fmt: skip
"""Every action a step takes. ``ANDROID_ACTIONS`` (tap, long_press, swipe, open_app) are android sandboxes' own."""


# --------------------------------------------------------------------------- results


class ExecResult(Model):
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: float = 0.0
    session_restarted: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class Screenshot(Model):
    # In JSON (REST bodies, model_dump_json) the image travels as URL-safe base64 (RFC 4648 section 5).
    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    data: bytes = Field(repr=False)
    width: int
    height: int
    format: Literal["png", "jpeg"]


class FileInfo(Model):
    name: str
    path: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int
    mode: int
    mtime: float


class HealthCheck(Model):
    ok: bool
    detail: str


class Health(Model):
    ok: bool
    checks: dict[str, HealthCheck]

    @property
    def failures(self) -> dict[str, str]:
        return {name: c.detail for name, c in self.checks.items() if not c.ok}


class Observation(Model):
    screenshot: Screenshot | None = None
    exec: ExecResult | None = None
    url: str | None = None
    title: str | None = None
    value: Any = None
    cursor: tuple[int, int] | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)
    reward: float | None = None
    done: bool = False
    info: dict[str, Any] = Field(default_factory=dict)
