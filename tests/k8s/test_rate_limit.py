"""The client-side rate limit (a token bucket: ``api_qps``, ``api_burst``) and the API server's 429 Too Many Requests
with Retry-After, on the fake API server through the real client: a 429 is sent again after the delay the server
names, a few times and then it fails as throttling; a burst past the bucket waits its turn instead of failing; and
the fake's own throttle (the suite's rate) answers 429 in API Priority and Fairness's words."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from sandbox.backends.kubernetes.api import KubeApi, core_path
from sandbox.backends.kubernetes.throttle import RETRIES_429, TokenBucket, retry_after
from sandbox.errors import Unavailable
from sandbox.testing.fake_kube import FakeKube, Realism
from tests.k8s.fake_api_fixtures import NAMESPACE, k8s_config, sim_kube

__all__ = ["sim_kube"]
NAMESPACE_PATH = f"/api/v1/namespaces/{NAMESPACE}"


@pytest_asyncio.fixture(loop_scope="session")
async def api(sim_kube: FakeKube) -> AsyncIterator[KubeApi]:
    made = await KubeApi.connect(k8s_config(sim_kube))
    try:
        yield made
    finally:
        await made.close()


async def test_a_429_is_sent_again_after_its_retry_after(sim_kube: FakeKube, api: KubeApi) -> None:
    before = api.throttled
    await sim_kube.throttle_next(1, retry_after_s=1)
    started = time.monotonic()
    found = await api.get(NAMESPACE_PATH, what="read the namespace")
    assert found["metadata"]["name"] == NAMESPACE
    assert time.monotonic() - started >= 1.0  # it waited as told
    assert api.throttled == before + 1


async def test_a_watch_answered_429_is_opened_again(sim_kube: FakeKube, api: KubeApi) -> None:
    listing = await api.list(core_path(NAMESPACE, "pods"), what="list pods")
    before = api.throttled
    await sim_kube.throttle_next(2, retry_after_s=0)
    events = api.watch(core_path(NAMESPACE, "pods"), what="watch pods",
                       resource_version=listing["metadata"]["resourceVersion"], timeout_s=1)  # fmt: skip
    async for kind, _ in events:
        assert kind == "BOOKMARK"  # nothing changed: only the bookmark before the watch's end
    assert api.throttled == before + 2


async def test_throttled_past_the_retries_fails_as_throttling(sim_kube: FakeKube, api: KubeApi) -> None:
    await sim_kube.throttle_next(RETRIES_429 + 1, retry_after_s=0)
    with pytest.raises(Unavailable, match="throttling this client"):
        await api.get(NAMESPACE_PATH, what="read the namespace")
    assert (await api.get(NAMESPACE_PATH, what="read the namespace"))["metadata"]["name"] == NAMESPACE


async def test_the_fakes_rate_answers_429_in_apfs_words() -> None:
    kube = FakeKube(mode="simulate", owner="ratelimit", namespaces=(NAMESPACE,), realism=Realism(throttle=(1.0, 2)))
    await asyncio.to_thread(kube.start)
    client = await KubeApi.connect(k8s_config(kube, owner="ratelimit", api_qps=0))
    try:
        for _ in range(2):  # the burst
            await client.get(NAMESPACE_PATH, what="read")
        started = time.monotonic()
        await client.get(NAMESPACE_PATH, what="read")  # over the server's share: 429, retried after 1 s
        assert client.throttled >= 1 and time.monotonic() - started >= 0.9
        assert kube.api is not None and kube.api.throttled >= 1
    finally:
        await client.close()
        await asyncio.to_thread(kube.close)


async def test_a_burst_past_the_bucket_waits_its_turn() -> None:
    bucket = TokenBucket(qps=20, burst=5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(*(bucket.acquire() for _ in range(25)))  # 5 at once, then 20 at 20 a second
    assert loop.time() - started >= 0.95
    assert TokenBucket(qps=0, burst=1).waited_s == 0.0


def test_retry_after_is_bounded() -> None:
    assert retry_after({"Retry-After": "3"}) == 3.0
    assert retry_after({}) == 1.0 and retry_after({"Retry-After": "soon"}) == 1.0
    assert retry_after({"Retry-After": "3600"}) == 10.0
