"""Capacity and admission: how much a host holds, what each sandbox reserves, what each tenant may take, and who
waits when it is full. Pure bookkeeping: the service tells it what starts and what ends; it never calls an engine.

    usage.py      Usage: CPUs, memory and pids, with the arithmetic of reservations
    settings.py   CapacitySettings: reserves, overcommit, per-kind requests, warm share, surge, waiting
    model.py      CapacityModel: a host's allocatable resources and what a spec reserves on it
    quotas.py     Quota and QuotaBook: each tenant's limits, from the tokens file
    ledger.py     Ledger: every instance's reservation, held, warm or being started
    queue.py      WaitQueue: callers waiting for capacity, FIFO within a tenant, round robin across tenants
    admission.py  Admission: grants, refusals that say what to do, the wait, eviction of warm instances
    pressure.py   MemoryPressure: the kernel's PSI, which stops admission before the OOM killer starts
    report.py     CapacityReport: what the API shows of it (the SDK imports this module alone)

Modules are imported by name (``from sandbox.capacity.admission import Admission``): this package's own import
brings in nothing, so the SDK can read the report's models without the rest.
"""
