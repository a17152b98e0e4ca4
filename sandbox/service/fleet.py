"""One page of the sandboxes a caller sees, for the web view at fleet scale: search, filters, problems first, paging.

It reads the store's documents as they are and builds records only for the page it returns: a poll of a list of
thousands costs a pass over dicts, not thousands of model validations. Tenancy is ``list_sandboxes``'s: a tenant
sees its own sandboxes, an admin everyone's, nobody an expired one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sandbox.errors import InvalidArgument
from sandbox.models import SandboxKind, SandboxState
from sandbox.service.auth import Principal
from sandbox.service.records import SANDBOXES, SandboxRecord
from sandbox.store import Store

FAILING = "failing"
"""The state filter that matches every sandbox in trouble: unhealthy, or with an error."""
MAX_LIMIT = 200
STATES = frozenset(s.value for s in SandboxState) | {FAILING}
KINDS = frozenset(k.value for k in SandboxKind)


@dataclass(frozen=True)
class FleetQuery:
    q: str = ""
    """Words that must all match (case-insensitive): ``key=value`` a label (``key=`` just has it), anything else a
    part of the id, the tenant, the task id of its episode, or a label's key or value."""
    kind: str | None = None
    state: str | None = None
    """A ``SandboxState`` value, or ``failing``."""
    offset: int = 0
    limit: int = 24

    def check(self) -> None:
        if self.kind is not None and self.kind not in KINDS:
            raise InvalidArgument(f"kind must be one of {sorted(KINDS)}, not {self.kind!r}")
        if self.state is not None and self.state not in STATES:
            raise InvalidArgument(f"state must be one of {sorted(STATES)}, not {self.state!r}")
        if self.offset < 0 or not 1 <= self.limit <= MAX_LIMIT:
            raise InvalidArgument(f"offset must be >= 0 and limit in 1..{MAX_LIMIT}")
        if len(self.q) > 500:
            raise InvalidArgument("q is at most 500 characters")


@dataclass
class FleetPage:
    total: int
    """Every sandbox the caller sees."""
    matched: int
    """Those the query matches; ``records`` is ``matched[offset:offset + limit]``."""
    records: list[SandboxRecord]
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    """Of every sandbox the caller sees: how many of each ``kind`` and ``state`` (``failing`` too)."""


async def fleet_page(store: Store, principal: Principal, query: FleetQuery) -> FleetPage:
    """The page ``query`` asks for, in order: failing first, then creating, then the rest; newest first in each."""
    query.check()
    docs = [
        d for d in (await store.all(SANDBOXES)).values()
        if principal.can_see(str(d.get("tenant"))) and d.get("state") != SandboxState.EXPIRED.value
    ]  # fmt: skip
    kinds: Counter[str] = Counter(_kind(d) for d in docs)
    states: Counter[str] = Counter(str(d.get("state")) for d in docs)
    states[FAILING] = sum(1 for d in docs if _failing(d))
    terms = [_term(word) for word in query.q.lower().split()]
    matched = [
        d for d in docs
        if (query.kind is None or _kind(d) == query.kind)
        and (query.state is None or (_failing(d) if query.state == FAILING else d.get("state") == query.state))
        and all(_matches(d, term) for term in terms)
    ]  # fmt: skip
    matched.sort(key=_order)
    page = [SandboxRecord.model_validate(d) for d in matched[query.offset : query.offset + query.limit]]
    return FleetPage(
        total=len(docs), matched=len(matched), records=page, counts={"kind": dict(kinds), "state": dict(states)}
    )


def task_id(record: SandboxRecord) -> str | None:
    return record.episode.task_id if record.episode is not None else None


def _kind(doc: dict[str, Any]) -> str:
    return str((doc.get("spec") or {}).get("kind", SandboxKind.TERMINAL.value))


def _failing(doc: dict[str, Any]) -> bool:
    return doc.get("state") == SandboxState.UNHEALTHY.value or bool(doc.get("error"))


def _order(doc: dict[str, Any]) -> tuple[int, float, str]:
    rank = 0 if _failing(doc) else 1 if doc.get("state") == SandboxState.CREATING.value else 2
    return rank, -float(doc.get("created_at") or 0), str(doc.get("id"))


def _term(word: str) -> tuple[str, str | None]:
    """``(key, value)`` of a ``key=value`` word, else ``(word, None)``."""
    if "=" in word and not word.startswith("="):
        key, _, value = word.partition("=")
        return key, value
    return word, None


def _matches(doc: dict[str, Any], term: tuple[str, str | None]) -> bool:
    word, value = term
    labels = {str(k).lower(): str(v).lower() for k, v in ((doc.get("spec") or {}).get("labels") or {}).items()}
    if value is not None:
        return word in labels and value in labels[word]
    episode = doc.get("episode") or {}
    haystack = [str(doc.get("id", "")), str(doc.get("tenant", "")), str(episode.get("task_id") or "")]
    return any(word in text.lower() for text in haystack) or any(word in k or word in v for k, v in labels.items())
