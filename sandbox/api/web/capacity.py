"""The list page's capacity panel: what the host holds (held, warm, granted and free of what is allocatable), how
many sandboxes of each kind fit now, the calls waiting for capacity, and each tenant's use, quota and refusals.

It rides on the list's poll (``/view/api/sandboxes``, every 2 s), so it is the caller's report and no one else's:
``service.capacity(principal)`` (every tenant to an admin, else the caller's own tenant and waiting calls), and the
refusals of the tenants the caller may see.
"""

from __future__ import annotations

from typing import Any

from sandbox.capacity.report import Resources, TenantUse
from sandbox.service import Principal, SandboxService


def capacity_view(service: SandboxService, principal: Principal) -> dict[str, Any]:
    """The caller's capacity report as JSON; each tenant row also has ``refusals`` (why -> count). A tenant the
    caller sees that was refused while it holds nothing gets a row too (the report lists only tenants that hold)."""
    report = service.capacity(principal)
    refused: dict[str, dict[str, int]] = {}
    for (tenant, why), count in sorted(service.admission.refusals.items()):
        if principal.can_see(tenant):
            refused.setdefault(tenant, {})[why] = count
    rows = list(report.tenants)
    listed = {row.tenant for row in rows}
    quotas = service.admission.quotas
    for tenant in sorted(set(refused) - listed):
        quota = quotas.for_tenant(tenant, admin=principal.admin and tenant == principal.tenant)
        rows.append(TenantUse(tenant=tenant, sandboxes=0, reserved=Resources(), quota=quota.model_dump()))
    return {
        **report.model_dump(mode="json", exclude={"tenants"}),
        "tenants": [
            {**row.model_dump(mode="json"), "refusals": refused.get(row.tenant, {})}
            for row in sorted(rows, key=lambda r: r.tenant)
        ],
    }
