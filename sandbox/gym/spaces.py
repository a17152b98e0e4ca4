"""The gymnasium spaces of the sandbox envs, and the conversion of the platform's observations into them.

- **Observation**: a ``Dict``. Every kind has ``"text"`` (:class:`gymnasium.spaces.Text`): the last command's output
  (stdout, then stderr), or the error of an action that could not be done; a display kind (desktop, browser) adds
  ``"screenshot"``: ``Box(0, 255, (height, width, 3), uint8)`` of the screen after the step.
- **Action**: a ``Text`` of an action as an agent writes it: the platform's action JSON (``{"type": "click", "x":
  10, "y": 20}``), OSWorld's pyautogui code (``pyautogui.click(10, 20)``) or its ``WAIT``, ``DONE``, ``FAIL``.

Both texts range over the Basic Multilingual Plane (surrogates excepted): an agent's output and a shell's output
are any text, and ``Text.contains`` checks each character against the charset. A character beyond it (an emoji in
a command's output) becomes U+FFFD, and a text longer than the space's limit keeps its end.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from sandbox.errors import InvalidArgument
from sandbox.models import Action, Observation, ScreenSize
from sandbox.wire.convert import validate_action

MAX_TEXT = 16_384
"""Characters of command output an observation keeps (the end of it)."""
MAX_ACTION = 100_000
"""The longest action text (the platform's limit on pyautogui code)."""
TERMINAL_RENDER = (800, 480)
"""``render()`` of a sandbox without a display draws its last output in a frame of this size."""


@functools.cache
def charset() -> str:
    """Every character of the Basic Multilingual Plane but the surrogates."""
    return "".join(chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF)


@functools.cache
def text_space(max_length: int) -> spaces.Text:
    return spaces.Text(max_length=max_length, min_length=0, charset=charset())


def action_space() -> spaces.Text:
    return spaces.Text(max_length=MAX_ACTION, min_length=0, charset=charset())


def observation_space(screen: ScreenSize | None) -> spaces.Dict:
    """``{"text"}``, plus ``{"screenshot"}`` of ``screen``'s size for a display kind (``screen`` not None)."""
    parts: dict[str, spaces.Space[Any]] = {"text": spaces.Text(max_length=MAX_TEXT, min_length=0, charset=charset())}
    if screen is not None:
        parts["screenshot"] = spaces.Box(0, 255, (screen.height, screen.width, 3), np.uint8)
    return spaces.Dict(parts)


def clean_text(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` within the space: characters beyond the BMP (or lone surrogates) as U+FFFD, its last ``limit``."""
    if len(text) > limit:
        text = text[-limit:]
    if text.isascii():
        return text
    return "".join(c if ord(c) < 0x10000 and not 0xD800 <= ord(c) <= 0xDFFF else "\ufffd" for c in text)


def output_text(obs: Observation) -> str:
    """What an agent reads of an observation: a command's stdout then stderr; else the page's title and URL."""
    if obs.exec is not None:
        return obs.exec.stdout + obs.exec.stderr
    if obs.url is not None:
        return f"{obs.title or ''}\n{obs.url}".strip()
    if obs.value is not None:
        return json.dumps(obs.value, ensure_ascii=False, default=str)
    return ""


def decode_frame(data: bytes, screen: ScreenSize) -> np.ndarray:
    """A PNG or JPEG screenshot as an (height, width, 3) uint8 array of ``screen``'s size."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
        if rgb.size != (screen.width, screen.height):
            raise InvalidArgument(
                f"the sandbox's screen is {rgb.size[0]}x{rgb.size[1]}, not the {screen.width}x{screen.height} of "
                "the env's observation space"
            )
        return np.asarray(rgb, dtype=np.uint8).copy()


def blank_frame(screen: ScreenSize) -> np.ndarray:
    return np.zeros((screen.height, screen.width, 3), dtype=np.uint8)


def to_gym(obs: Observation | None, screen: ScreenSize | None, *, text: str | None = None) -> dict[str, Any]:
    """A new observation dict (nothing shared with an earlier one). ``text`` overrides the observation's (an error);
    a display kind's step that brought no screenshot gets a blank frame."""
    out: dict[str, Any] = {"text": clean_text(text if text is not None else output_text(obs) if obs else "")}
    if screen is not None:
        shot = obs.screenshot if obs is not None else None
        out["screenshot"] = decode_frame(shot.data, screen) if shot is not None else blank_frame(screen)
    return out


def parse_action(action: str | Mapping[str, Any] | Action) -> Action:
    """An agent's action: a model, a dict, or text (JSON of an action object; otherwise pyautogui code or OSWorld's
    ``WAIT``/``DONE``/``FAIL``). ``InvalidArgument`` when it is none of them."""
    if isinstance(action, str):
        stripped = action.strip()
        if not stripped:
            raise InvalidArgument("an empty action: write an action's JSON or pyautogui code")
        if stripped.startswith("{"):
            try:
                data = json.loads(stripped)
            except ValueError as e:
                raise InvalidArgument(f"the action looks like JSON but is not: {e}") from None
            return validate_action(data)
        return validate_action(stripped)
    return validate_action(action)


def render_text(text: str, size: tuple[int, int] = TERMINAL_RENDER) -> np.ndarray:
    """A terminal-like frame of the last lines of ``text`` (``render()`` of a sandbox with no display)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, (16, 18, 24))
    draw = ImageDraw.Draw(image)
    lines = text.splitlines()[-(size[1] // 14 - 1) :]
    draw.multiline_text((8, 6), "\n".join(line[:120] for line in lines), fill=(215, 220, 228), spacing=2)
    return np.asarray(image, dtype=np.uint8).copy()
