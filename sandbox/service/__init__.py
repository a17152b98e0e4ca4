"""The service layer: everything the API skins call."""

from sandbox.service.auth import Principal, TokenRegistry
from sandbox.service.service import SandboxService

__all__ = ["Principal", "SandboxService", "TokenRegistry"]
