"""The browser games the platform ships: small HTML5 games with no external assets and no network, installed in
the browser and desktop images under ``/opt/sandbox/games`` and opened from ``file://``.

Each game page is deterministic given its seed (``?seed=N``) and exposes, for evaluators and scripted policies,
``window.game = {state(), seed(n), reset()}``: ``state()`` is a JSON object with at least ``score``, ``level`` and
``over``. A game reads time only through ``performance.now()``, timers and animation frames, so the page clock the
agent installs (``window.__clock``, see ``sandbox/agent/pages.py``) drives it: open a game with the ``page_open``
action (``clock: "paused"`` for reproducible episodes), play it with ``page_key`` / ``page_click``, advance its time
with ``clock`` steps and read ``game.state()`` with ``evaluate``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

SOURCE_DIR = Path(__file__).resolve().parent
IMAGE_DIR = "/opt/sandbox/games"
"""Where the games are in the images."""
IMAGE_KINDS = ("browser", "desktop")
"""The sandbox kinds whose images carry the games."""
STATE_JS = "window.game.state()"
"""The JavaScript expression whose value is the game's state."""


@dataclass(frozen=True)
class Game:
    name: str
    title: str
    description: str
    controls: str
    state_fields: tuple[str, ...]
    """The fields of ``game.state()``."""
    params: dict[str, str] = field(default_factory=dict)
    """URL parameters besides ``seed``, with what they mean."""

    @property
    def path(self) -> str:
        return f"{IMAGE_DIR}/{self.name}/index.html"

    def url(self, seed: int | None = None, **params: int) -> str:
        """The game's ``file://`` URL in a sandbox, with its seed and parameters."""
        unknown = set(params) - set(self.params)
        if unknown:
            raise ValueError(f"{self.name} takes no parameter {sorted(unknown)}; it takes {sorted(self.params)}")
        query = {**({"seed": seed} if seed is not None else {}), **params}
        return f"file://{self.path}" + (f"?{urlencode(query)}" if query else "")


GAMES: dict[str, Game] = {
    "tiles": Game(
        name="tiles",
        title="Tiles",
        description="A sliding-tile game like 2048 on a 4x4 board: equal tiles that meet merge into their sum.",
        controls="page_key ArrowUp/ArrowDown/ArrowLeft/ArrowRight (or w/a/s/d); no clock needed to play",
        state_fields=("game", "seed", "score", "level", "over", "won", "max_tile", "moves", "board", "time_ms"),
    ),
    "reflex": Game(
        name="reflex",
        title="Reflex",
        description=(
            "Targets appear at seeded places and clock times; click each before it expires. Every 5 hits is a "
            "level (faster, shorter-lived targets); the game ends when its time is up or after too many misses."
        ),
        controls="page_click on a target's centre (state().targets[i].x, .y are page pixels); clock steps",
        state_fields=(
            "game",
            "seed",
            "score",
            "level",
            "over",
            "hits",
            "misses",
            "stray",
            "time_ms",
            "duration_ms",
            "max_misses",
            "targets",
        ),
        params={"duration": "the game's length in ms (default 30000)", "misses": "misses that end it (default 5)"},
    ),
}


def game(name: str) -> Game:
    try:
        return GAMES[name]
    except KeyError:
        raise KeyError(f"no game {name!r}; the games are {', '.join(GAMES)}") from None


def state_expression(path: str = "") -> str:
    """JavaScript for the game's state, or one field of it (``"score"``, ``"board"``), as a JSON value."""
    if not path:
        return STATE_JS
    return f"{STATE_JS}[{json.dumps(path)}]"


def asset_files() -> list[tuple[str, bytes]]:
    """Every file of the games (not this Python module) as (path relative to :data:`IMAGE_DIR`, content)."""
    paths = sorted(
        p
        for p in SOURCE_DIR.rglob("*")
        if p.is_file() and p.suffix not in {".py", ".pyc", ".pyo"} and "__pycache__" not in p.parts
    )
    return [(p.relative_to(SOURCE_DIR).as_posix(), p.read_bytes()) for p in paths]
