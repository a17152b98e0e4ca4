"""preview: one small GET through a preview URL (``/v1/sandboxes/{id}/ports/{port}/``, proxied through the agent's
tunnel) from the host vs the same GET straight to the same server from inside the sandbox (a loop in the sandbox on
its loopback: the host cannot reach a sandbox's address, by design, and the sandbox has no network). The difference
is the proxy's overhead per request: a tunnel and an HTTP exchange per request, ``Connection: close`` on both legs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from bench import BenchError
from bench.harness import Bench, SectionResult
from bench.report import Row, Target
from bench.sections.common import series
from bench.stats import Summary, speedup

NAME = "preview"
PORT = 8000
MAX_OVERHEAD_MS = 10.0
BASELINE = "direct GET from inside the sandbox"


DIRECT_LOOP = """
import json, sys, time, urllib.request
url, count = sys.argv[1], int(sys.argv[2])
took = []
for _ in range(count):
    started = time.perf_counter()
    with urllib.request.urlopen(url) as response:
        assert len(response.read()) == 1024
    took.append(time.perf_counter() - started)
print(json.dumps(took))
"""


async def _direct(sandbox: Any, samples: int, warmup: int) -> list[float]:
    """``samples`` GETs from inside the sandbox, each timed there (after ``warmup`` untimed ones)."""
    url = f"http://127.0.0.1:{PORT}/blob"
    result = await sandbox.exec(["python3", "-c", DIRECT_LOOP, url, str(samples + warmup)], timeout=300)
    if result.exit_code != 0:
        raise BenchError(f"the direct GET loop in the sandbox failed: {result.stderr[-500:]}")
    took: list[float] = json.loads(result.stdout)
    return took[warmup:]


async def run(bench: Bench, samples: int = 200, warmup: int = 10) -> SectionResult:
    """Register with ``"preview": preview.run`` in bench/sections/__init__.py and ``"preview"`` in SECTION_NAMES."""
    progress = bench.progress
    async with bench.platform("preview") as platform:
        sandbox = await platform.client.create(kind="terminal")
        await sandbox.exec("mkdir -p /workspace/site && head -c 1024 /dev/urandom > /workspace/site/blob")
        await sandbox.exec(
            f"cd /workspace/site && python3 -m http.server {PORT} >/tmp/http.log 2>&1 &", keep_background=True
        )
        proxy_url = f"{platform.server.http_url}/v1/sandboxes/{sandbox.id}/ports/{PORT}/blob"
        async with httpx.AsyncClient(timeout=30) as http:
            for _ in range(100):  # the server comes up
                try:
                    if (await http.get(proxy_url)).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise BenchError("the http.server in the sandbox did not come up")

            def getter(url: str):  # type: ignore[no-untyped-def]
                async def call() -> None:
                    response = await http.get(url)
                    if response.status_code != 200 or len(response.content) != 1024:
                        raise BenchError(f"GET {url}: {response.status_code}")

                return call

            ours = await series(progress, "preview: through the proxy", getter(proxy_url), samples, warmup)
            progress.say("preview: direct, from inside the sandbox")
            direct = await _direct(sandbox, samples, warmup)
        await sandbox.close()
    ours_s, direct_s = Summary.of(ours), Summary.of(direct)
    overhead_ms = (ours_s.p50 - direct_s.p50) * 1000
    target = Target(f"≤ {MAX_OVERHEAD_MS:g} ms added at p50", overhead_ms <= MAX_OVERHEAD_MS)
    row = Row(NAME, "GET 1 KiB through a preview URL", ours_s, direct_s, BASELINE, speedup(direct_s.p50, ours_s.p50),
              target, f"{overhead_ms:.2f} ms added per request at p50")  # fmt: skip
    return SectionResult([row], {"overhead_ms_p50": round(overhead_ms, 3)})
