"""Sandbox records parsed once, not on every read.

``ParsedRecords``: the lifecycle re-reads every record on each tick (lease expiry twice a second, health and
reconciliation less often). Decoding a record's JSON costs about 13 µs and validating it about 20 µs, so 1,000
sandboxes cost about 17 ms of the event loop per tick (measured), most of it for records that have not changed. A
record is decoded and parsed again only when its version moved (the store's ``all_versioned_since`` hands back just
the version of a document that did not); versions are store-wide and never reused, so an unchanged version is an
unchanged document — within one store's life: a wiped store counts from its start again, so the lifecycle starts a
fresh ``ParsedRecords`` when it adopts after a wipe.

The records handed out are the ones kept, shared from one read to the next: a caller reads them, and copies one
(``model_copy()``) before changing it or handing it to code that may.

``ParsedTexts``: ``Records.read``, on every step and every other call that names a sandbox, reads the record's JSON
text (``Store.get_stored``) and decodes and validates it only when the text differs from the one it parsed last for
that sandbox (about 25 µs a read saved: the JSON decode and the validation). The text, not the version, is what it
compares: the same text is the same record whatever happened to the store meanwhile (a wipe, another replica's
writes), so no epoch needs watching. The version is the one just read; each read hands out a copy.
"""

from __future__ import annotations

from sandbox.service.records import SANDBOXES, SandboxRecord
from sandbox.store import Store, Stored, Versioned

TEXTS_KEPT = 8192
"""The most records ``ParsedTexts`` keeps parsed; past it, the first kept is dropped (it is parsed again when read)."""


class ParsedRecords:
    def __init__(self) -> None:
        self._parsed: dict[str, SandboxRecord] = {}

    async def read(self, store: Store) -> list[SandboxRecord]:
        """Every sandbox's record as stored now, parsed only where its version moved since the last read."""
        known = {key: record.version for key, record in self._parsed.items() if record.version is not None}
        return self.parse(await store.all_versioned_since(SANDBOXES, known))

    def parse(self, found: dict[str, Versioned | int]) -> list[SandboxRecord]:
        """The records of ``found`` (key -> stored document, or just the version of one this has parsed)."""
        parsed: dict[str, SandboxRecord] = {}
        for key, versioned in found.items():
            record = self._parsed.get(key)
            if isinstance(versioned, Versioned) and (record is None or record.version != versioned.version):
                record = SandboxRecord.model_validate(versioned.doc)
                record.version = versioned.version
            if record is None:  # a version this never parsed (the caller's own mistake): nothing to hand out
                raise KeyError(f"{key}: only a version, and no record of it parsed")
            parsed[key] = record
        self._parsed = parsed  # records deleted since the last read are dropped
        return list(parsed.values())


class ParsedTexts:
    def __init__(self, *, keep: int = TEXTS_KEPT) -> None:
        self._parsed: dict[str, tuple[str, SandboxRecord]] = {}
        self._keep = keep

    def parse(self, key: str, stored: Stored | None) -> SandboxRecord | None:
        """The record of ``stored`` (None: there is none), at its version: a copy its caller may change."""
        if stored is None:
            self._parsed.pop(key, None)
            return None
        held = self._parsed.get(key)
        if held is None or held[0] != stored.text:  # equal texts are often the same object: no comparison
            record = SandboxRecord.model_validate(stored.decode())
            if held is None and len(self._parsed) >= self._keep:
                del self._parsed[next(iter(self._parsed))]
            self._parsed[key] = (stored.text, record)
        else:
            record = held[1]
        return _copy(record, stored.version)


def _copy(record: SandboxRecord, version: int) -> SandboxRecord:
    """A copy of ``record`` at ``version`` that shares nothing its caller may change: the spec is frozen, the episode
    (the one other model in it) is copied too."""
    copy = record.model_copy()
    copy.version = version
    if record.episode is not None:
        copy.episode = record.episode.model_copy()
    return copy
