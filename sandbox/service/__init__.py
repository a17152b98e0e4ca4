"""The service layer: everything the API skins call."""

from sandbox.service.auth import Principal, TokenRegistry
from sandbox.service.sandboxes import SandboxService

__all__ = ["Principal", "SandboxService", "TokenRegistry"]
