"""What every model, and every action model, is made of: shared by the modules of :mod:`sandbox.models` (the
android actions of :mod:`sandbox.models.android` join ``Action`` in :mod:`sandbox.models.actions`)."""

from __future__ import annotations

import functools
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _type_required(schema: dict[str, Any]) -> None:
    # `type` has a default (a model built in Python needs no tag), but a request's action is told apart by it
    required = schema.setdefault("required", [])
    if "type" not in required:
        required.insert(0, "type")


class _Action(Model):
    model_config = ConfigDict(json_schema_extra=_type_required)

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_numbers(cls, data: Any) -> Any:
        """Refuse ``true``/``false`` where a number goes: pydantic's lax mode would take them as 1 and 0 (a click's
        ``count: true``), while it must still take ``3.0`` for an integer, as JSON Schema does."""
        if isinstance(data, dict):
            for name, value in data.items():
                if isinstance(value, bool) and not _bool_allowed(cls, name):
                    raise ValueError(f"{name} takes no boolean, and {str(value).lower()} is one")
        return data


@functools.cache
def _bool_allowed(model: type[BaseModel], name: str) -> bool:
    """Whether a boolean may go in ``name`` (an unknown name: the model's own check refuses it)."""
    field = model.__pydantic_fields__.get(name)
    return field is None or _takes_bool(field.annotation)


def _takes_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) in (typing.Union, Annotated):
        return any(_takes_bool(arg) for arg in typing.get_args(annotation))
    return False


Button = Literal["left", "middle", "right"]
Coord = Annotated[int, Field(ge=0, le=16_384)]
