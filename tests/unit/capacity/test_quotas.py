"""Tenant quotas: read from the tokens document, what each tenant gets, what exceeding one says."""

from __future__ import annotations

import pytest

from sandbox.capacity.quotas import UNLIMITED, Quota, QuotaBook
from sandbox.capacity.usage import Usage
from sandbox.errors import InvalidArgument
from sandbox.service.auth import TokenRegistry, is_structured

DOCUMENT = {
    "tokens": {"a" * 16: "team-a", "b" * 16: {"tenant": "ops", "admin": True}, "c" * 16: "team-c"},
    "quotas": {"team-a": {"max_sandboxes": 2, "max_memory_mb": 100}},
    "default_quota": {"max_sandboxes": 1, "max_group": 4},
}


def test_the_structured_document_gives_tokens_and_quotas() -> None:
    assert is_structured(DOCUMENT)
    tokens = TokenRegistry.from_mapping(DOCUMENT)
    assert tokens.authenticate("a" * 16).tenant == "team-a"
    assert tokens.authenticate("b" * 16).admin
    book = QuotaBook.from_document(DOCUMENT)
    assert book.for_tenant("team-a") == Quota(max_sandboxes=2, max_memory_mb=100)
    assert book.for_tenant("team-c") == Quota(max_sandboxes=1, max_group=4), "a tenant not named gets the default"
    assert book.for_tenant("ops", admin=True) is UNLIMITED, "an admin has no limits unless its tenant is named"
    assert book.for_tenant("team-a", admin=True).max_sandboxes == 2, "a named tenant's quota holds for its admin"


def test_the_flat_document_still_reads_and_has_no_quotas() -> None:
    flat = {"a" * 16: "team-a"}
    assert not is_structured(flat)
    assert TokenRegistry.from_mapping(flat).authenticate("a" * 16).tenant == "team-a"


@pytest.mark.parametrize(
    "bad", [{"quotas": {"t": {"max_sandboxes": -1}}}, {"default_quota": {"max_cpu": 3}}, {"quotas": ["t"]}]
)
def test_a_bad_quota_is_refused_naming_it(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument, match="quotas are not valid"):
        QuotaBook.from_document(bad)


def test_exceeded_names_each_limit() -> None:
    quota = Quota(max_sandboxes=2, max_cpus=1.0, max_memory_mb=100)
    assert quota.exceeded(2, Usage(1.0, 100, 0)) == []
    over = quota.exceeded(3, Usage(1.5, 101, 0))
    assert [line.split(":")[0] for line in over] == ["sandboxes", "CPUs", "memory"]
    assert "3 would be held, the quota is 2" in over[0]
