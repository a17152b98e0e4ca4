"""``sandbox capacity``: the host's room, what is reserved, who waits for capacity, each tenant's use and quota;
and the waiting table ``sandbox ls`` prints under the sandboxes."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from sandbox.capacity.report import CapacityReport, Resources, WaitingCall
from sandbox.cli.common import DEFAULT_TARGET, TargetOpt, TokenOpt, connect, console, fail
from sandbox.errors import SandboxError


def waiting_table(waiting: Sequence[WaitingCall]) -> Table:
    table = Table("place", "tenant", "kind", "count", "waited", "gives up in", title="waiting for capacity")
    for call in waiting:
        table.add_row(
            str(call.position),
            call.tenant,
            call.kind,
            str(call.count),
            f"{call.waited_s:.0f}s",
            f"{call.gives_up_in_s:.0f}s",
        )
    return table


def _amount(r: Resources | None) -> str:
    if r is None:
        return "-"
    return f"{r.memory_mb:,.0f} MiB, {r.cpus:,.2f} CPU, {r.pids:,} pids"


def render(report: CapacityReport) -> None:
    if not report.bounded:
        console.print("host capacity: not checked here (Kubernetes' scheduler places sandboxes); quotas hold")
    else:
        table = Table("", "reserved", title="host capacity")
        for name, value in (
            ("allocatable", report.allocatable),
            ("held by sandboxes", report.held),
            ("warm (pools, replicas)", report.warm),
            ("admitted, starting", report.granted),
            ("free for new sandboxes", report.free),
        ):
            table.add_row(name, _amount(value))
        console.print(table)
        fits = ", ".join(f"{kind} {n} (of {report.fits_empty.get(kind, 0)})" for kind, n in report.fits_now.items())
        console.print(f"fit now (default specs; of an empty host): {fits}")
    if report.under_pressure:
        console.print(f"[red]admission stopped[/red]: {report.under_pressure}")
    if report.waiting:
        console.print(waiting_table(report.waiting))
    if report.tenants:
        tenants = Table("tenant", "sandboxes", "reserved", "quota", title="tenants")
        for use in report.tenants:
            quota = ", ".join(f"{k}={v:g}" for k, v in use.quota.items() if v is not None) or "none"
            tenants.add_row(use.tenant, str(use.sandboxes), _amount(use.reserved), quota)
        console.print(tenants)


def capacity(target: TargetOpt = DEFAULT_TARGET, token: TokenOpt = None) -> None:
    """Show the host's capacity, what is reserved and free, who waits for it, and tenants' use and quotas."""
    try:
        with connect(target, token) as client:
            report = client.capacity()
    except SandboxError as e:
        fail(e)
    render(report)
