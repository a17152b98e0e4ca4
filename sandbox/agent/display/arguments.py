"""Arguments of display requests: bounded integers and screen coordinates."""

from __future__ import annotations

import math
from typing import Any, cast

from sandbox.agent.errors import bad_request, require


def int_arg(args: dict[str, Any], name: str, lo: int, hi: int, default: int | None = None) -> int:
    value = cast(int, require(args, name, int) if default is None else require(args, name, int, default))
    if not lo <= value <= hi:
        raise bad_request(f"argument {name!r} must be between {lo} and {hi}, got {value}")
    return value


def coordinate(args: dict[str, Any], name: str, limit: int) -> int:
    number = cast(float, require(args, name, (int, float)))
    if not math.isfinite(number):
        raise bad_request(f"argument {name!r} must be a finite number")
    value = round(number)
    if not 0 <= value < limit:
        raise bad_request(f"argument {name!r} = {value} is outside the screen (0..{limit - 1})")
    return value
