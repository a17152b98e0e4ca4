"""What every model, and every action model, is made of: shared by :mod:`sandbox.models` and
:mod:`sandbox.models_android` (whose actions join ``models.Action``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Action(Model):
    pass


Button = Literal["left", "middle", "right"]
Coord = Annotated[int, Field(ge=0, le=16_384)]
