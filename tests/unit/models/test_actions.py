"""What the action models take from a request: ``type`` tells the action (the schema requires it, as validation
does), and a number is never a boolean, while ``3.0`` is still an integer, as JSON Schema has it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from sandbox.errors import InvalidArgument
from sandbox.models import Action, Click, Exec, Scroll
from sandbox.models.android import Swipe
from sandbox.wire import convert


@pytest.mark.parametrize(
    ("action", "field"),
    [
        ({"type": "click", "x": 1, "y": 2, "count": True}, "count"),
        ({"type": "click", "x": False, "y": 2}, "x"),
        ({"type": "swipe", "x": 0, "y": 0, "to_x": 0, "to_y": False}, "to_y"),
        ({"type": "exec", "cmd": "true", "timeout": True}, "timeout"),
    ],
)
def test_a_boolean_is_no_number(action: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument, match=f"{field} takes no boolean"):
        convert.validate_action(action)


def test_a_whole_float_is_an_integer_and_booleans_go_where_they_belong() -> None:
    assert convert.validate_action({"type": "click", "x": 3.0, "y": 4}) == Click(x=3, y=4)
    assert convert.validate_action({"type": "exec", "cmd": "true", "keep_background": True}) == Exec(
        cmd="true", keep_background=True
    )


@pytest.mark.parametrize("model", [Click, Exec, Scroll, Swipe])
def test_the_schema_requires_the_type_that_tells_the_action(model: Any) -> None:
    assert model.model_json_schema()["required"][0] == "type"


def test_an_action_without_its_type_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="discriminator 'type'"):
        convert.validate_action({"x": 1, "y": 1})


def test_every_action_in_the_union_requires_its_type() -> None:
    schema = TypeAdapter(Action).json_schema()
    actions = schema["$defs"]
    assert actions, schema
    assert all("type" in d.get("required", []) for d in actions.values() if "type" in d.get("properties", {}))
