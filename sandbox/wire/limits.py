"""How big and how long: the gRPC message size limit, and the one deadline rule.

The deadline rule layers three budgets around an operation's own timeout (an exec's ``timeout``,
a wait's ``seconds``), each strictly longer than the one inside it, so that the innermost party
that can say what went wrong is the one that answers:

1. **op timeout**: the agent enforces it inside the sandbox and answers with a ``timeout`` error;
2. **agent transport deadline** = op timeout + :data:`AGENT_SLACK_S` (:func:`agent_deadline`):
   how long the control plane waits for the agent's reply frame before calling the agent
   unavailable;
3. **client RPC deadline** = op timeout + :data:`CALL_SLACK_S` (:func:`call_deadline`): the
   gRPC deadline the SDK sets, beyond the agent transport deadline plus the control plane's own
   work (queueing, store round trips), so a slow agent surfaces as the server's error rather than
   a bare client-side ``DEADLINE_EXCEEDED``.

Stdlib only: the control plane's agent client imports it too.
"""

from __future__ import annotations

from typing import Any

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""The largest gRPC message either side sends or accepts."""

MESSAGE_SIZE_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]
"""gRPC channel and server options for :data:`MAX_MESSAGE_BYTES`, the same on both sides."""

AGENT_SLACK_S = 5.0
"""Beyond an operation's own timeout, how long the control plane waits for the agent's reply."""

CALL_SLACK_S = 30.0
"""Beyond an operation's own timeout, how long the client's RPC may take (more than :data:`AGENT_SLACK_S`)."""


def agent_deadline(op_timeout: float) -> float:
    """How long the control plane waits for the agent's answer to an operation of ``op_timeout`` seconds."""
    return op_timeout + AGENT_SLACK_S


def call_deadline(op_timeout: float) -> float:
    """The gRPC deadline for an RPC running an operation of ``op_timeout`` seconds: past :func:`agent_deadline`."""
    return op_timeout + CALL_SLACK_S
