"""SWE-ReX on this platform: a deployment that is a sandbox, and a runtime that acts in it.

    from sandbox.compat.swerex import SandboxDeployment
    deployment = SandboxDeployment(target="127.0.0.1:50051")      # a terminal sandbox, no network
    await deployment.start()
    await deployment.runtime.create_session(CreateBashSessionRequest())
    ...
    await deployment.stop()                                       # deletes the sandbox

Needs ``swe-rex`` (``pip install 'sandbox[swerex]'``); docs/compat.md says what differs from SWE-ReX's own runtimes.
"""

try:
    import swerex  # noqa: F401
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("sandbox.compat.swerex needs swe-rex: pip install 'sandbox[swerex]'") from e

from sandbox.compat.swerex.deployment import SandboxDeployment, SandboxDeploymentConfig
from sandbox.compat.swerex.runtime import SandboxRuntime

__all__ = ["SandboxDeployment", "SandboxDeploymentConfig", "SandboxRuntime"]
