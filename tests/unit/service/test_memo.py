from __future__ import annotations

import functools

import pytest

from sandbox.errors import InvalidArgument
from sandbox.memo import IdentityMemo, Memo
from sandbox.models import SandboxKind, SandboxSpec
from sandbox.service.records import pool_key
from sandbox.wire import convert
from sandbox.wire.grpc_gen import sandbox_pb2 as pb


def test_a_memo_makes_each_value_once_and_drops_the_oldest_first() -> None:
    made: list[str] = []
    memo: Memo[str, str] = Memo(size=2)

    def make(key: str) -> str:
        made.append(key)
        return key.upper()

    assert [memo.get(k, functools.partial(make, k)) for k in ("a", "a", "b", "a", "c", "a")] == list("AABACA")
    assert made == ["a", "b", "c", "a"]  # "c" pushed "a" out
    assert len(memo) == 2


def test_a_failed_make_stores_nothing() -> None:
    memo: Memo[str, int] = Memo()

    def fail() -> int:
        raise ValueError("no")

    with pytest.raises(ValueError):
        memo.get("k", fail)
    assert memo.get("k", lambda: 1) == 1


def test_an_identity_memo_tells_equal_objects_apart() -> None:
    memo: IdentityMemo[list[int], int] = IdentityMemo()
    a, b = [1], [1]
    assert memo.get(a, lambda: 10) == 10
    assert memo.get(b, lambda: 20) == 20
    assert memo.get(a, lambda: 30) == 10
    assert memo.get(a, lambda: 40, extra="other") == 40


def test_the_same_spec_message_gives_the_same_spec_and_a_bad_one_is_refused_every_time() -> None:
    message = pb.SandboxSpec(kind=pb.SANDBOX_KIND_TERMINAL)
    message.env["A"] = "1"
    first, second = (
        convert.spec_from_proto(message),
        convert.spec_from_proto(pb.SandboxSpec.FromString(message.SerializeToString())),
    )
    assert first is second and first.env == {"A": "1"}
    bad = pb.SandboxSpec(kind=pb.SANDBOX_KIND_TERMINAL, ttl_s=-1)
    for _ in range(2):
        with pytest.raises(InvalidArgument):
            convert.spec_from_proto(bad)


def test_wire_forms_are_copies_and_pool_keys_follow_the_spec() -> None:
    spec = SandboxSpec(kind=SandboxKind.TERMINAL, env={"A": "1"})
    message = convert.spec_to_proto(spec)
    message.env["B"] = "2"  # a caller changing its copy changes nobody else's
    assert dict(convert.spec_to_proto(spec).env) == {"A": "1"}
    same = SandboxSpec(kind=SandboxKind.TERMINAL, env={"A": "1"})
    other = SandboxSpec(kind=SandboxKind.TERMINAL, env={"A": "2"})
    assert pool_key(spec, "img") == pool_key(same, "img") == pool_key(spec, "img")
    assert pool_key(spec, "img") != pool_key(other, "img")
    assert pool_key(spec, "img") != pool_key(spec, "other-img")
