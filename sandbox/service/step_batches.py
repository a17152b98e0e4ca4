"""Steps in many sandboxes in one call (a vectorized environment's step): each in its own sandbox, all at once.

One sandbox's failure fails no other: each step is answered, in the order asked, by its observation or its error.
Each step is exactly what ``SandboxService.step`` does alone (an episode counts it, a trajectory records it): that is
the ``step`` this part is given. The batch saves the API's per-call work, not the steps'.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import NamedTuple, Protocol

from sandbox.errors import InternalError, SandboxError
from sandbox.models import Action, Observation
from sandbox.models.step_batch import check_step_batch
from sandbox.service.auth import Principal


class StepOrder(NamedTuple):
    sandbox_id: str
    action: Action
    screenshot: bool = False


class Step(Protocol):
    """One step, as ``SandboxService.step`` takes it (the episode-aware step)."""

    def __call__(
        self, principal: Principal, sandbox_id: str, action: Action, *, screenshot: bool = False
    ) -> Awaitable[Observation]: ...


class StepBatches:
    def __init__(self, *, step: Step) -> None:
        self.step = step
        """What each order's step is: the service's own ``step``."""

    async def step_many(self, principal: Principal, orders: Sequence[StepOrder]) -> list[Observation | SandboxError]:
        """Each order's step, all at once; the answers in the orders' order. A step that failed for a reason that is
        no SandboxError (a bug) answers InternalError, its cause attached for the API's log."""
        check_step_batch([order.sandbox_id for order in orders])
        outcomes = await asyncio.gather(
            *(self.step(principal, o.sandbox_id, o.action, screenshot=o.screenshot) for o in orders),
            return_exceptions=True,
        )
        return [_answer(outcome) for outcome in outcomes]


def _answer(outcome: Observation | BaseException) -> Observation | SandboxError:
    if isinstance(outcome, Observation | SandboxError):
        return outcome
    if not isinstance(outcome, Exception):  # a step cancelled alone, or an exit: not an answer to give
        raise outcome
    bug = InternalError(f"internal error in a batched step ({type(outcome).__name__}); see the server log")
    bug.__cause__ = outcome
    return bug
