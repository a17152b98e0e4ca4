"""The gRPC skin's side of a batch of steps (``StepMany``): the service's orders from the request, and a reply that
fits one message."""

from __future__ import annotations

from sandbox.errors import InvalidArgument, ResourceExhausted
from sandbox.service.step_batches import StepOrder
from sandbox.wire import convert
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from sandbox.wire.limits import MAX_MESSAGE_BYTES


def step_orders(request: pb.StepManyRequest) -> list[StepOrder]:
    return [_order(i, step) for i, step in enumerate(request.steps)]


def _order(index: int, step: pb.StepRequest) -> StepOrder:
    """A malformed step names its place in the batch."""
    if step.HasField("observe") or not step.HasField("action"):
        raise InvalidArgument(f"steps[{index}]: a batched step needs an action (observe with Observe or a StepStream)")
    try:
        return StepOrder(step.sandbox_id, convert.action_from_proto(step.action), step.screenshot)
    except InvalidArgument as e:
        raise InvalidArgument(f"steps[{index}]: {e.message}") from e


def fitting(reply: pb.StepManyResponse) -> pb.StepManyResponse:
    """``reply``, or ResourceExhausted when it is larger than one message may be (many desktops' screenshots): gRPC
    would fail it with less to say. Its steps were done by then."""
    size = reply.ByteSize()
    if size > MAX_MESSAGE_BYTES:
        raise ResourceExhausted(
            f"the answers to this batch of {len(reply.results)} steps come to {size / 2**20:.1f} MiB, over the "
            f"{MAX_MESSAGE_BYTES // 2**20} MiB a message holds; its steps were done: observe each sandbox for its "
            "screen, and ask for fewer screenshots a batch"
        )
    return reply
