"""The Python SDK: the platform's gRPC API as sync and async clients with the same signatures.

    from sandbox.client import Client

    with Client("127.0.0.1:50051", token="...") as client:
        with client.create(kind="terminal") as sb:
            print(sb.exec("echo hi").stdout)
            obs = sb.step({"type": "exec", "cmd": "ls"})
            sb.files.write("notes.txt", "hello")

How sync and async share their code
-----------------------------------
There are no hand-written sync/async twins. Everything a call *does* — validating its arguments
with the models (bad input fails here, before any I/O, as ``InvalidArgument`` naming the field),
building the proto request, choosing the deadline, chunking files, reading the reply — is written
once in :mod:`sandbox.client._ops` as a small generator that yields the I/O it needs and receives
the results ("sans-I/O"); turning a failed RPC into the platform's exception (the server's own
message kept, grpc's bare "Deadline Exceeded" or "failed to connect" made to say which call, where,
after how long, and what to check) is :mod:`sandbox.client._errors`.

- :class:`Client` runs those generators over grpc's **blocking** channel,
- :class:`AsyncClient` runs them over a **grpc.aio** channel.

Each public method of either client is a one-line hand-off to its driver, and
``tests/unit/client/test_sdk_parity.py`` checks the two surfaces have the same names and signatures.

Why not the other common choice, a sync client that runs the async one on a private event-loop
thread? It costs two thread hand-offs on every call (latency is the point of this API) and a
hidden thread and loop per client whose lifetime someone must manage. grpc's blocking channel is
its own, direct path.
"""

from sandbox.client._async import AsyncClient, AsyncFiles, AsyncSandbox, AsyncStepStream, AsyncTrajectories
from sandbox.client._lane import AsyncLane, Lane
from sandbox.client._sync import Client, Files, Sandbox, StepStream, Trajectories

__all__ = [
    "AsyncClient",
    "AsyncFiles",
    "AsyncLane",
    "AsyncSandbox",
    "AsyncStepStream",
    "AsyncTrajectories",
    "Client",
    "Files",
    "Lane",
    "Sandbox",
    "StepStream",
    "Trajectories",
]
