"""What this control-plane process remembers of each sandbox's use, outside the store: its recent actions (the web
view lists them), when a call last noted its activity in the record (those writes are spaced out, see
``acting.TOUCH_EVERY_S``), and the tail of its command output (``output_tail``).

It lives in this process only: with several replicas behind a balancer, a page shows what ran through the replica it
asks. A reset forgets the sandbox's history; a delete forgets everything of it.
"""

from __future__ import annotations

from collections import deque

from sandbox.models import Action
from sandbox.service.output_tail import OutputTails

RECENT_ACTIONS = 50
"""The actions kept per sandbox."""


class Activity:
    def __init__(self) -> None:
        self.recent: dict[str, deque[tuple[float, Action]]] = {}
        """Sandbox id -> its last actions, each (when, the action), oldest first (``Acting.recent_actions`` says
        them as JSON: only when asked, not on every step)."""
        self.touched: dict[str, float] = {}
        """Sandbox id -> when a call last wrote its ``last_active_at``."""
        self.output = OutputTails()
        """The tail of each sandbox's recent command output (the web view's terminal cards)."""

    def note_action(self, sandbox_id: str, at: float, action: Action) -> None:
        """One action done in the sandbox at ``at`` (through the control plane, or a direct lane's, read later)."""
        self.recent.setdefault(sandbox_id, deque(maxlen=RECENT_ACTIONS)).append((at, action))

    def forget_history(self, sandbox_id: str) -> None:
        """A reset: the actions and the output before it are another sandbox's story."""
        self.recent.pop(sandbox_id, None)
        self.output.forget(sandbox_id)

    def forget(self, sandbox_id: str) -> None:
        """A delete: nothing of the sandbox is kept."""
        self.forget_history(sandbox_id)
        self.touched.pop(sandbox_id, None)
