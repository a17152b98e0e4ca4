"""Hostile input, generated: property tests (hypothesis) over the models every surface validates with (actions,
sandbox specs, task files) and over the agent's frame decoder, plus the agent's file API on FIFOs and devices.

The property everywhere: any input either parses or is refused with the one clear error of that layer
(``pydantic.ValidationError`` for models, ``FrameError`` or a clean end of stream for frames), never another
exception and never a hang."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from sandbox.agent.errors import AgentError
from sandbox.agent.files import Files
from sandbox.models import Action, SandboxSpec
from sandbox.protocol import MAX_HEADER_BYTES, ErrorCode, FrameError, encode_frame, read_frame
from sandbox.tasks import Task, TaskError

ACTION = TypeAdapter(Action)
PROFILE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# JSON-like values, with the keys and values the models know mixed in, so that many examples get past the first check.
KEYS = st.sampled_from(
    ["type", "x", "y", "to_x", "to_y", "button", "count", "dx", "dy", "text", "key", "keys", "seconds", "cmd",
     "timeout", "cwd", "env", "session", "url", "expression", "page", "op", "ms", "factor", "code", "kind", "image",
     "resources", "screen", "network", "volumes", "labels", "ttl_s", "cpus", "memory_mb", "pids", "name", "path",
     "width", "height", "depth", "id", "instruction", "config", "evaluator", "func", "result", "expected"]
)  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["move", "click", "exec", "type_text", "DONE", "WAIT", "FAIL", "terminal", "desktop", "internal",
                     "../../etc", "/proc", "\x00", "left", "step", "pause", "ctrl+c"]),
)  # fmt: skip
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.one_of(KEYS, st.text(max_size=8)), inner, max_size=6)
    ),
    max_leaves=25,
)


def _refused_cleanly(parse: Any, value: Any) -> None:
    with contextlib.suppress(ValidationError):  # the clear refusal; anything else raised fails the test
        parse(value)


@PROFILE
@given(JSON)
def test_any_json_is_an_action_or_a_validation_error(value: Any) -> None:
    _refused_cleanly(ACTION.validate_python, value)


@PROFILE
@given(st.dictionaries(st.one_of(KEYS, st.text(max_size=8)), JSON, max_size=8), st.sampled_from(
    ["move", "click", "drag", "scroll", "type_text", "key", "hotkey", "wait", "exec", "navigate", "evaluate",
     "page_open", "page_close", "clock", "page_key", "page_click", "pyautogui", "done", "fail"]))  # fmt: skip
def test_any_fields_under_a_known_action_type_parse_or_are_refused(fields: dict[str, Any], kind: str) -> None:
    _refused_cleanly(ACTION.validate_python, {**fields, "type": kind})
    _refused_cleanly(ACTION.validate_json, json.dumps({**fields, "type": kind}, allow_nan=True).encode())


@PROFILE
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_are_an_action_or_a_validation_error(raw: bytes) -> None:
    _refused_cleanly(ACTION.validate_json, raw)


@PROFILE
@given(st.dictionaries(st.one_of(KEYS, st.text(max_size=8)), JSON, max_size=10))
def test_any_json_is_a_sandbox_spec_or_a_validation_error(fields: dict[str, Any]) -> None:
    _refused_cleanly(SandboxSpec.model_validate, {"kind": "terminal", **fields})
    _refused_cleanly(SandboxSpec.model_validate, fields)


def _task_or_task_error(text: str | bytes) -> None:
    """A task file parses (and then checks, digests and dumps without error) or is refused with ``TaskError``."""
    try:
        task = Task.from_json(text)
    except TaskError:
        return
    assert isinstance(task.problems(), list)
    assert task.digest() and Task.from_json(task.to_json()).to_dict() == task.to_dict()


@PROFILE
@given(st.dictionaries(st.one_of(KEYS, st.text(max_size=8)), JSON, max_size=10))
def test_any_task_file_loads_or_is_refused_with_a_task_error(fields: dict[str, Any]) -> None:
    base = {"id": "t", "instruction": "do it", "config": [], "evaluator": {"func": "exact_match"}}
    _task_or_task_error(json.dumps({**base, **fields}))
    _task_or_task_error(json.dumps(fields))
    _task_or_task_error(json.dumps({**base, "evaluator": fields}))
    _task_or_task_error(json.dumps({**base, "config": [fields]}))


@PROFILE
@given(st.binary(max_size=200))
def test_any_bytes_as_a_task_file_load_or_are_refused(raw: bytes) -> None:
    _task_or_task_error(raw)


@PROFILE
@given(
    st.sampled_from([-1, 0, 2**31, 1e308, float("inf"), float("nan"), "1e9", [], {}]),
    st.sampled_from(["cpus", "memory_mb", "pids", "shm_mb"]),
)
def test_out_of_range_limits_are_refused(value: Any, limit: str) -> None:
    with pytest.raises(ValidationError):
        SandboxSpec.model_validate({"kind": "terminal", "resources": {limit: value}})


@PROFILE
@given(st.sampled_from(["..", "/run/sandbox", "/proc", "/sys", "/", "relative", "/a/../b", ""]), st.text(max_size=5))
def test_volume_paths_into_system_directories_are_refused(path: str, name: str) -> None:
    with pytest.raises(ValidationError):
        SandboxSpec.model_validate({"kind": "terminal", "volumes": [{"name": "v" + name, "path": path}]})


# ------------------------------------------------------------------------------------------------ the frame decoder


async def _decode(raw: bytes, **limits: Any) -> tuple[dict[str, Any], bytes] | None:
    reader = asyncio.StreamReader()
    reader.feed_data(raw)
    reader.feed_eof()
    try:
        return await asyncio.wait_for(read_frame(reader, **limits), 5)
    except (FrameError, asyncio.IncompleteReadError):
        return None


def _prefixed(head: bytes, blob: bytes, head_len: int | None = None, blob_len: int | None = None) -> bytes:
    return struct.pack(">II", len(head) if head_len is None else head_len, len(blob) if blob_len is None else blob_len)


@PROFILE
@given(st.binary(max_size=300))
def test_any_bytes_decode_to_a_frame_or_a_frame_error(raw: bytes) -> None:
    decoded = asyncio.run(_decode(raw))
    assert decoded is None or isinstance(decoded[0], dict)


@PROFILE
@given(
    st.one_of(JSON.map(lambda v: json.dumps(v, allow_nan=True).encode()), st.binary(max_size=64)),
    st.binary(max_size=64),
    st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    st.one_of(st.none(), st.integers(0, 2**32 - 1)),
)
def test_lying_lengths_and_any_header_never_crash_the_decoder(
    head: bytes, blob: bytes, head_len: int | None, blob_len: int | None
) -> None:
    raw = _prefixed(head, blob, head_len, blob_len) + head + blob
    decoded = asyncio.run(_decode(raw, max_blob=1024))
    if decoded is not None:
        header, payload = decoded
        assert isinstance(header, dict) and isinstance(payload, bytes)


@PROFILE
@given(st.dictionaries(st.text(max_size=10), JSON, max_size=5), st.binary(max_size=256))
def test_every_encoded_frame_decodes_to_itself(header: dict[str, Any], blob: bytes) -> None:
    try:
        raw = encode_frame(header, blob)
    except ValueError:
        return  # NaN and friends have no JSON spelling the decoder must accept back; the encoder says so
    decoded = asyncio.run(_decode(raw))
    assert decoded is not None
    assert json.dumps(decoded[0], sort_keys=True) == json.dumps(header, sort_keys=True) and decoded[1] == blob


async def test_oversized_frames_are_refused_before_they_are_read() -> None:
    for head_len, blob_len in ((MAX_HEADER_BYTES + 1, 0), (2, 2**31), (2**32 - 1, 2**32 - 1)):
        reader = asyncio.StreamReader()
        reader.feed_data(_prefixed(b"{}", b"", head_len, blob_len) + b"{}")  # no EOF: reading on would hang
        with pytest.raises(FrameError, match="exceeds"):
            await asyncio.wait_for(read_frame(reader, max_blob=1024, skip_oversized=False), 5)


# ------------------------------------------------------------------------------------- the file API on odd files


@pytest.fixture
def files(tmp_path: Path) -> Files:
    (tmp_path / "ws").mkdir()
    return Files(roots=[str(tmp_path / "ws")], default_dir=str(tmp_path / "ws"))


async def test_a_fifo_is_refused_at_once_not_waited_on(files: Files, tmp_path: Path) -> None:
    fifo = tmp_path / "ws" / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(AgentError) as read:
        await asyncio.wait_for(files.read({"path": "pipe"}, b""), 5)
    assert read.value.code == ErrorCode.BAD_REQUEST and "not a regular file" in str(read.value)
    with pytest.raises(AgentError) as appended:
        await asyncio.wait_for(files.write({"path": "pipe", "append": True}, b"x"), 5)
    assert appended.value.code in (ErrorCode.BAD_REQUEST, ErrorCode.PERMISSION_DENIED), appended.value
    assert fifo.is_fifo(), "a refused append leaves the FIFO as it was"
    # With a reader on the other end, still no regular file: refused, not written into.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(AgentError, match="not a regular file"):
            await asyncio.wait_for(files.write({"path": "pipe", "append": True}, b"x"), 5)
        assert os.read(reader, 10) == b""
    finally:
        os.close(reader)


async def test_a_device_reached_inside_the_roots_is_refused(files: Files, tmp_path: Path) -> None:
    # A bind of /dev/null into the roots is what a planted device looks like (mknod needs privileges tests lack).
    (tmp_path / "ws" / "null").symlink_to("/dev/null")
    with pytest.raises(AgentError, match="outside the allowed roots"):
        await files.read({"path": "null"}, b"")
    wide = Files(roots=[str(tmp_path / "ws"), "/dev"], default_dir=str(tmp_path / "ws"))
    for device in ("/dev/null", "/dev/zero", "/dev/urandom"):
        with pytest.raises(AgentError, match="not a regular file"):
            await asyncio.wait_for(wide.read({"path": device}, b""), 5)
