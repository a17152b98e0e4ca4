"""How the service takes tasks: the ``tasks`` server settings, the fixtures a task's downloads resolve through, and
the name of a task's post-setup snapshot."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sandbox.errors import InvalidArgument
from sandbox.service.snapshots import MAX_WARM
from sandbox.tasks.model import Task
from sandbox.tasks.runtime import Fixtures

SNAPSHOT_PREFIX = "task-"
MAX_SENT_FIXTURE_BYTES = 48 * 1024 * 1024


class TaskSettings(BaseModel):
    """The ``tasks`` section of the server settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fixtures_dir: str | None = Field(
        None, description="Mirror folder of the files tasks download: https://host/a/b.txt is <dir>/host/a/b.txt."
    )
    url_map: str | None = Field(
        None, description="JSON file {URL: path} of files tasks download (paths relative to the file's folder)."
    )
    warm_per_task: int = Field(
        1, ge=0, le=MAX_WARM, description="Warm replicas kept of each task's post-setup snapshot (0: none)."
    )
    password: str = Field("password", description="The sandbox user's password, OSWorld's {CLIENT_PASSWORD}.")
    task_snapshot_ttl_s: float | None = Field(
        24 * 3600.0,
        gt=0,
        description="A task's post-setup snapshot no reset used for this long is removed: its record, warm replicas "
        "and image (null: kept however long unused).",
    )
    max_task_snapshots: int | None = Field(
        64,
        ge=1,
        description="Most task snapshots kept (each keeps warm_per_task replicas running); the least recently used "
        "beyond it are removed (null: no bound).",
    )

    def fixtures(self) -> Fixtures:
        urls: dict[str, str | Path] = {}
        if self.url_map:
            path = Path(self.url_map).expanduser()
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise InvalidArgument(f"cannot read the fixture URL map {path}: {e}") from e
            if not isinstance(raw, dict):
                raise InvalidArgument(f"the fixture URL map {path} must be a JSON object of URL -> path")
            urls = {str(url): path.parent / str(p) for url, p in raw.items()}
        directory = Path(self.fixtures_dir).expanduser() if self.fixtures_dir else None
        return Fixtures(directory, urls)


class SentFixtures(Fixtures):
    """The server's fixtures, with the files a client sent along with its task on top."""

    def __init__(self, base: Fixtures, sent: Mapping[str, bytes]) -> None:
        super().__init__(base.directory, base.urls)
        self.sent = dict(sent)

    def has(self, url: str) -> bool:
        return url in self.sent or super().has(url)

    def get(self, url: str) -> bytes | None:
        return self.sent[url] if url in self.sent else super().get(url)


def task_snapshot_name(digest: str) -> str:
    return f"{SNAPSHOT_PREFIX}{digest[:16]}"


def load_task(data: Any, fixtures: Fixtures) -> Task:
    """A task from request data (an object, or its JSON text); ``InvalidArgument`` listing every problem."""
    if isinstance(data, Task):
        return Task.from_dict(data.to_dict(), fixtures=fixtures)
    if isinstance(data, str | bytes):
        return Task.from_json(data, fixtures=fixtures)
    return Task.from_dict(data, fixtures=fixtures)
