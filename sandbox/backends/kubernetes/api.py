"""The few REST calls the backend makes, on kubernetes_asyncio's ``ApiClient`` (its kubeconfig or in-cluster
configuration, its auth and TLS, its aiohttp session).

Objects travel as plain dicts, exactly as the API server sends them: no model classes are built, so a LIST of
thousands of pods costs one ``json.loads``, and the manifests the backend sends are the very dicts the unit tests
validate. Every failure leaves here as a :mod:`sandbox.errors` exception (see errors.py).

Every request first takes a token of the client-side rate limit (``api_qps``, ``api_burst``: throttle.py), and one
answered 429 is sent again after the server's ``Retry-After`` (a few times, each wait bounded). Watches ask for
bookmarks (``allowWatchBookmarks``: the server then tells an idle watcher how far the history went, so a watch that
starts again resumes from there instead of from a version long expired); a LIST can be read in pages (``limit`` and
``continue``), or from the API server's watch cache (``resourceVersion=0``) rather than as a quorum read of etcd.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException

from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.backends.kubernetes.errors import TRANSLATED, for_status, translate
from sandbox.backends.kubernetes.throttle import RETRIES_429, TokenBucket, retry_after
from sandbox.errors import SandboxError, Unavailable

# The client logs every response body at DEBUG; a Secret's body holds an agent's token. Never below INFO, then.
logging.getLogger("kubernetes_asyncio.client.rest").setLevel(logging.INFO)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
_OBJECT = {200: "object", 201: "object", 202: "object"}
_AUTH = ["BearerToken"]
_COLLECTION = re.compile(r"^(.*/namespaces/[^/]+/[^/]+)")
"""The collection of an object's path (``.../namespaces/<ns>/<resource>``)."""
_CONFIG_ERRORS: tuple[type[BaseException], ...] = (*TRANSLATED, OSError)


def core_path(namespace: str, resource: str, name: str | None = None, sub: str | None = None) -> str:
    """``/api/v1/namespaces/<ns>/<resource>[/<name>[/<sub>]]`` (pods, secrets, persistentvolumeclaims)."""
    path = f"/api/v1/namespaces/{namespace}/{resource}"
    return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def policy_path(namespace: str, name: str | None = None) -> str:
    path = f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"
    return path + (f"/{name}" if name else "")


def _load_configuration(config: KubernetesConfig) -> Configuration:
    """The client configuration from the kubeconfig, or the pod's ServiceAccount (in a worker thread: it reads
    files, and the kubeconfig loader may write certificate data to temporary files)."""
    configuration = Configuration()
    if config.kubeconfig:
        load = kube_config.load_kube_config(
            config_file=config.kubeconfig,
            context=config.context,
            client_configuration=configuration,
            persist_config=False,
        )
        asyncio.run(load)
    else:
        kube_config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = 128
    return configuration


class Expired(Unavailable):
    """410 Gone on a watch: the resourceVersion asked for is older than the history the API server keeps; list
    again (what an informer does at once, without counting it a failure)."""


class KubeApi:
    def __init__(self, client: ApiClient, *, timeout_s: float, qps: float = 0.0, burst: int = 1) -> None:
        self._client = client
        self.timeout_s = timeout_s
        self.limiter = TokenBucket(qps, burst)
        self.throttled = 0
        """How many answers were 429 (each retried after its Retry-After)."""
        self.written: dict[str, int] = {}
        """Collection path -> the highest resourceVersion a write of ours there was answered with: what a cache of
        that collection must have seen before it answers this process (read your own writes; pod_cache.py)."""

    @classmethod
    async def connect(cls, config: KubernetesConfig) -> KubeApi:
        where = f"kubeconfig {config.kubeconfig}" if config.kubeconfig else "the in-cluster ServiceAccount"
        try:
            configuration = await asyncio.to_thread(_load_configuration, config)
        except _CONFIG_ERRORS as e:
            raise translate(e, f"configure the Kubernetes client from {where}") from e
        return cls(ApiClient(configuration), timeout_s=config.api_timeout_s, qps=config.api_qps, burst=config.api_burst)

    async def close(self) -> None:
        await self._client.close()

    async def call(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        """One request; the response object (a dict). A 429 is sent again after its Retry-After (the API server
        rejected it before doing anything, so even a create is safe to send again)."""
        attempt = 0
        while True:
            await self.limiter.acquire()
            try:
                result = await self._client.call_api(
                    path,
                    method,
                    query_params=list((query or {}).items()),
                    header_params={"Accept": JSON, "Content-Type": content_type},
                    body=body,
                    response_types_map=_OBJECT,
                    auth_settings=_AUTH,
                    _return_http_data_only=True,
                    _request_timeout=self.timeout_s,
                )
            except ApiException as e:
                if e.status == 429 and attempt < RETRIES_429:
                    attempt += 1
                    self.throttled += 1
                    await asyncio.sleep(retry_after(e.headers))
                    continue
                raise translate(e, what) from e
            except TRANSLATED as e:
                raise translate(e, what) from e
            answer = result if isinstance(result, dict) else {}
            if method != "GET":
                self._note_write(path, answer)
            return answer

    def _note_write(self, path: str, answer: dict[str, Any]) -> None:
        version = str((answer.get("metadata") or {}).get("resourceVersion") or "")
        match = _COLLECTION.match(path)
        if match and version.isdigit():
            collection = match.group(1)
            self.written[collection] = max(self.written.get(collection, 0), int(version))

    async def get(self, path: str, *, what: str) -> dict[str, Any]:
        return await self.call("GET", path, what=what)

    async def list(
        self,
        path: str,
        *,
        what: str,
        selector: str = "",
        fields: str = "",
        page: int = 0,
        resource_version: str = "",
    ) -> dict[str, Any]:
        """The list object (``items``, ``metadata.resourceVersion``). ``page``: read it ``page`` items a request
        (``limit``, then ``continue``: one consistent snapshot, in pieces the API server and this process decode one
        at a time); a continue token that expired meanwhile (410) starts the listing again. ``resource_version``
        "0": any recent state, served from the API server's watch cache instead of a quorum read of etcd (what an
        informer lists with before it watches)."""
        base: dict[str, Any] = {k: v for k, v in (("labelSelector", selector), ("fieldSelector", fields)) if v}
        if resource_version:
            base["resourceVersion"] = resource_version
        if page > 0:
            base["limit"] = page
        while True:
            items: list[Any] = []
            query, listing = dict(base), {}
            try:
                while True:
                    listing = await self.call("GET", path, what=what, query=query)
                    items.extend(listing.get("items") or [])
                    token = (listing.get("metadata") or {}).get("continue")
                    if not token or page <= 0:
                        break
                    query = {**base, "continue": token}
                    query.pop("resourceVersion", None)  # a continue token carries its version
            except Unavailable as e:
                if "continue" in query and "gone" in e.message:
                    continue  # the token expired: list again from the start
                raise
            return {**listing, "items": items}

    async def create(self, path: str, body: dict[str, Any], *, what: str) -> dict[str, Any]:
        return await self.call("POST", path, what=what, body=body)

    async def merge_patch(self, path: str, patch: dict[str, Any], *, what: str) -> dict[str, Any]:
        return await self.call("PATCH", path, what=what, body=patch, content_type=MERGE_PATCH)

    async def delete(self, path: str, *, what: str, grace_s: int | None = None) -> dict[str, Any]:
        query: dict[str, Any] = {"propagationPolicy": "Background"}
        if grace_s is not None:
            query["gracePeriodSeconds"] = grace_s
        return await self.call("DELETE", path, what=what, query=query)

    async def text(self, path: str, *, what: str, query: dict[str, Any] | None = None) -> str:
        """A plain-text resource (pods/log)."""
        try:
            response = await self._raw(path, query or {}, self.timeout_s)
            try:
                data = await response.read()
                if response.status >= 300:
                    raise for_status(response.status, data, what)
                return data.decode("utf-8", errors="replace")
            finally:
                response.release()
        except TRANSLATED as e:
            raise translate(e, what) from e

    async def watch(
        self, path: str, *, what: str, resource_version: str, timeout_s: float, fields: str = "", selector: str = ""
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """(event type, object) for each change after ``resource_version``, until the server ends the stream after
        ``timeout_s``; BOOKMARK events (an object with only ``metadata.resourceVersion``) too. An ERROR event (410
        Gone: the version is too old) raises."""
        query: dict[str, Any] = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": max(1, int(timeout_s)),
            "allowWatchBookmarks": "true",
        }
        query.update({k: v for k, v in (("fieldSelector", fields), ("labelSelector", selector)) if v})
        try:
            response = await self._raw(path, query, timeout_s + self.timeout_s)
            try:
                if response.status >= 300:
                    raise _watch_error(response.status, await response.read(), what)
                while line := await response.content.readline():
                    event = json.loads(line)
                    kind, obj = str(event.get("type", "")), event.get("object") or {}
                    if kind == "ERROR":
                        raise _watch_error(int(obj.get("code") or 500), obj, what)
                    yield kind, obj
            finally:
                response.release()
        except TRANSLATED as e:
            raise translate(e, what) from e

    async def _raw(self, path: str, query: dict[str, Any], timeout_s: float) -> aiohttp.ClientResponse:
        """The response, unread (a stream); a 429 is sent again after its Retry-After, as in :meth:`call`."""
        attempt = 0
        while True:
            await self.limiter.acquire()
            response: aiohttp.ClientResponse = await self._client.call_api(
                path,
                "GET",
                query_params=list(query.items()),
                header_params={"Accept": JSON},
                auth_settings=_AUTH,
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=self.timeout_s),
            )
            if response.status != 429 or attempt >= RETRIES_429:
                return response
            attempt += 1
            self.throttled += 1
            delay = retry_after(response.headers)
            response.release()
            await asyncio.sleep(delay)


def _watch_error(code: int, body: Any, what: str) -> SandboxError:
    error = for_status(code, body, what)
    return Expired(error.message) if code == 410 else error
