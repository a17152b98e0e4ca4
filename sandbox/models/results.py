"""What the platform answers: an observation (screenshot, exec result, page, reward, episode info), an exec's
result, a file's listing entry, a health report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field

from sandbox.models.base import Model
from sandbox.models.images import ImageFormat, decode

if TYPE_CHECKING:
    from PIL import Image


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

    @classmethod
    def from_agent(cls, result: dict[str, Any], stdout: bytes, stderr: bytes) -> ExecResult:
        """An ``exec`` answer of the in-sandbox agent: its header's ``result`` and the two streams of its blob."""
        return cls(
            exit_code=result["exit_code"],
            stdout=stdout.decode("utf-8", errors="replace"),
            stderr=stderr.decode("utf-8", errors="replace"),
            timed_out=result["timed_out"],
            stdout_truncated=result["stdout_truncated"],
            stderr_truncated=result["stderr_truncated"],
            duration_ms=result["duration_ms"],
            session_restarted=result.get("session_restarted", False),
        )


class Screenshot(Model):
    # In JSON (REST bodies, model_dump_json) the image travels as URL-safe base64 (RFC 4648 section 5).
    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    data: bytes = Field(repr=False)
    width: int
    height: int
    format: ImageFormat = Field(description="png, jpeg, or zstd (the screen's BGRX pixels, see sandbox.models.images)")

    def image(self) -> Image.Image:
        """The screenshot as an RGB Pillow image, whatever its format (needs Pillow; ``zstd`` also a decoder, see
        :mod:`sandbox.models.images`)."""
        return decode(self.data, self.format, self.width, self.height)


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
