"""The bodies of preview URLs (``sandbox.url(port)``), shared by the service, its API skins and the SDK."""

from __future__ import annotations

from pydantic import Field

from sandbox.models.base import Model


class UrlRequest(Model):
    """What a preview URL is minted for (REST's body, gRPC's ``PreviewUrlRequest``, the SDK's arguments)."""

    port: int = Field(ge=1024, le=65535, description="A port in the sandbox (not the platform's own).")
    ttl_s: float | None = Field(None, gt=0, le=86400, description="The ticket's lifetime (default 300 s).")
    full_path: bool = Field(
        False,
        description="The form at /v1/sandboxes/{id}/apps/{port}/, whose app gets the whole path, prefix included "
        "(for apps told their base path: Jupyter's base_url); false: /ports/{port}/, the prefix stripped.",
    )


class PortUrl(Model):
    """A URL on the control plane that proxies HTTP and websockets to ``port`` inside the sandbox."""

    port: int
    url: str = Field(description="Open this: the preview with its ticket (traded for a cookie on first use).")
    path: str = Field(
        description="The preview's path prefix on the control plane, /v1/sandboxes/{id}/ports/{port}/ (or "
        "/apps/{port}/ for full_path: the app's base path)."
    )
    ticket: str = Field(description="Opens this port of this sandbox only; redeem it before expires_at.")
    expires_at: float


class ListeningPort(Model):
    port: int
    addresses: list[str]
    previewable: bool = Field(description="Whether a preview URL reaches it (not a platform port, not below 1024).")
