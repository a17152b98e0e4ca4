"""A batch of steps, one per sandbox (a vectorized environment's step): what makes one well-formed. The SDK checks it
before sending, the service on arrival, so both say the same thing."""

from __future__ import annotations

from collections.abc import Sequence

from sandbox.errors import InvalidArgument
from sandbox.models.spec import GROUP_MAX

STEP_BATCH_MAX = GROUP_MAX
"""The most steps one batch carries: as many as one group create makes."""


def check_step_batch(sandbox_ids: Sequence[str]) -> None:
    """InvalidArgument unless each step names a sandbox, no sandbox twice (its steps would run at once, in no order),
    and there are at most :data:`STEP_BATCH_MAX`. An empty batch is well-formed: it does nothing."""
    if len(sandbox_ids) > STEP_BATCH_MAX:
        raise InvalidArgument(f"a batch holds at most {STEP_BATCH_MAX} steps, not {len(sandbox_ids)}")
    first: dict[str, int] = {}
    for i, sandbox_id in enumerate(sandbox_ids):
        if not sandbox_id:
            raise InvalidArgument(f"steps[{i}]: no sandbox_id")
        if (earlier := first.setdefault(sandbox_id, i)) != i:
            raise InvalidArgument(
                f"steps[{i}]: sandbox {sandbox_id} already has steps[{earlier}]; a batch takes one step a sandbox "
                "(its steps run at once, so two in one sandbox would race)"
            )
