"""The one service layer behind gRPC, REST, the CLI and the SDK, assembled from its parts:

    ServiceCore     records (read, compare-and-set), provisioning, locks        core.py
    FailureOps      mark failed, recover (restart in place or replace), expire  failures.py
    LeaseOps        create, get, list, delete, renew, reset                     leases.py
    ActingOps       step, observe, exec, files, health, logs, tunnels           acting.py
    SnapshotOps     snapshots and their warm instances                          snapshots.py
    TrajectoryOps   record episodes' steps; list, get, delete trajectories      trajectory_ops.py
    TaskSnapshotOps tasks' post-setup snapshots: taken once, removed unused     task_snapshots.py
    EpisodeOps      reset to a task, steps counted to the episode's end, reward episodes.py
    StepBatchOps    steps in many sandboxes in one call, all at once              step_batches.py

State lives in the store, so another replica, or this one after a restart, serves the same sandboxes.
"""

from __future__ import annotations

from sandbox.service.step_batches import StepBatchOps


class SandboxService(StepBatchOps):
    """Everything the API skins call; see the module docstring for where each part lives."""
