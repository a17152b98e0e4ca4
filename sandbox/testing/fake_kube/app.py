"""The fake API server's HTTP side (aiohttp): the Kubernetes REST paths of the resources the store serves (the
built-in ones of ``objects.RESOURCES`` and the custom ones of the CRDs created: ``/apis/<group>/<version>/...`` with
their ``status`` and ``scale`` subresources), ``pods/log``, ``?watch=true`` streams (one JSON event a line), the
discovery documents, bearer-token auth (401), RBAC refusals on demand (403), the ResourceQuota admission of
pods (403 "exceeded quota": quota.py) and Pod Security admission (403 "violates PodSecurity": psa.py), all errors as
Status objects. Also as the real server: LISTs in pages (``limit``, ``continue``; served whole from the "watch
cache" with ``resourceVersion=0``), watch bookmarks when asked (``allowWatchBookmarks``: every ``bookmark_s`` of
quiet, and before a watch's timeout ends it), and API Priority and Fairness's answer to a client over its share:
429 Too Many Requests with ``Retry-After`` (a token bucket of ``throttle`` = (qps, burst), or the next
``throttle_next`` requests on demand)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from sandbox.testing.fake_kube import custom, psa, quota
from sandbox.testing.fake_kube.objects import MANAGER, ApiError, ObjectStore, merge_patch

DISCOVERY = ("/api", "/apis", "/api/v1")
VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-fake",
    "gitCommit": "0" * 40,
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
LogReader = Callable[[str, str, int | None], Awaitable[str]]
"""(namespace, pod, tail lines) -> the pod's log; raises ApiError."""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Deleter = Callable[[str, str, int | None], Awaitable[dict[str, Any]]]
"""(namespace, pod, grace seconds) -> the deleted pod: deleting a pod goes through the kubelet's side."""


class FakeApi:
    def __init__(self, store: ObjectStore, *, token: str | None, logs: LogReader, delete_pod: Deleter) -> None:
        self.store = store
        self.token = token
        self.forbidden: set[tuple[str, str]] = set()
        """(verb, resource) pairs answered 403, as a Role without them would."""
        self.requests: deque[tuple[str, str]] = deque(maxlen=100_000)
        """(method, path?query) of every request, for tests that count calls."""
        self._logs = logs
        self._delete_pod = delete_pod
        self.bookmark_s: float | None = 60.0
        """Quiet time after which a watch that asked for bookmarks gets one (the real server: about a minute); None:
        no bookmarks ever (as a server whose watch cache is off for the resource)."""
        self.throttle: tuple[float, int] | None = None
        """(qps, burst) of all clients together, past which requests are answered 429 (None: never)."""
        self.throttle_next = 0
        """The next this many requests are answered 429, whatever the rate (a test's lever)."""
        self.retry_after_s = 1
        self.throttled = 0
        """How many requests were answered 429."""
        self._tokens = 0.0
        self._tokens_at: float | None = None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors])
        get, post = web.get, web.post
        ns_base = "/api/v1/namespaces/{ns}/{resource}"
        group_base = "/apis/{group}/{version}"
        app.add_routes(
            [
                *(get(p + slash, self._version) for p in ("/version",) for slash in ("", "/")),
                *(get(p + slash, self._discovery) for p in DISCOVERY for slash in ("", "/")),
                get("/api/v1/namespaces", self._collection),
                post("/api/v1/namespaces", self._collection),
                web.route("*", "/api/v1/namespaces/{name}", self._namespace_item),
                get("/api/v1/namespaces/{ns}/pods/{name}/log", self._log),
                get("/api/v1/{resource}", self._collection),
                web.route("*", ns_base, self._collection),
                web.route("*", ns_base + "/{name}", self._item),
                get(group_base, self._discovery),
                get(group_base + "/", self._discovery),
                web.route("*", group_base + "/namespaces/{ns}/{resource}", self._collection),
                web.route("*", group_base + "/namespaces/{ns}/{resource}/{name}", self._item),
                web.route("*", group_base + "/namespaces/{ns}/{resource}/{name}/{sub}", self._subresource),
                web.route("*", group_base + "/{resource}", self._collection),
                web.route("*", group_base + "/{resource}/{name}", self._cluster_item),
            ]
        )
        return app

    # ---------------------------------------------------------------- plumbing

    @web.middleware
    async def _errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        MANAGER.set(request.headers.get("User-Agent", "unknown").split("/")[0].split(" ")[0] or "unknown")
        try:
            if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if self._over_share(request):
                self.throttled += 1
                error = ApiError(429, "TooManyRequests", "Too many requests, please try again later.")
                body = error.status()
                body["details"] = {"retryAfterSeconds": self.retry_after_s}
                return web.json_response(body, status=429, headers={"Retry-After": str(self.retry_after_s)})
            return await handler(request)
        except ApiError as e:
            return web.json_response(e.status(), status=e.code)
        except web.HTTPNotFound:
            missing = ApiError(404, "NotFound", "the server could not find the requested resource")
            return web.json_response(missing.status(), status=404)

    def _over_share(self, request: web.Request) -> bool:
        """Whether API Priority and Fairness would reject the request now (discovery and /version never)."""
        if request.path.rstrip("/") in DISCOVERY or request.path.startswith("/version"):
            return False
        if self.throttle_next > 0:
            self.throttle_next -= 1
            return True
        if self.throttle is None:
            return False
        qps, burst = self.throttle
        now = time.monotonic()
        if self._tokens_at is None:
            self._tokens = float(burst)
        else:
            self._tokens = min(float(burst), self._tokens + (now - self._tokens_at) * qps)
        self._tokens_at = now
        if self._tokens < 1.0:
            return True
        self._tokens -= 1.0
        return False

    def _check(
        self, verb: str, resource: str, namespace: str | None = None, request: web.Request | None = None
    ) -> None:
        """404 for a resource not served at the request's group/version, 403 for a verb forbidden on it."""
        served = self.store.resources.get(resource.split("/")[0])
        if served is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if request is not None:
            group, version = request.match_info.get("group"), request.match_info.get("version")
            asked = f"{group}/{version}" if group else "v1"
            scoped = namespace is not None or request.method == "POST" or "name" in request.match_info
            if asked != served[0] or (scoped and bool(namespace) != served[2]):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if (verb, resource) in self.forbidden:
            where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
            raise ApiError(
                403,
                "Forbidden",
                f'{resource} is forbidden: User "system:serviceaccount:test:sandbox" cannot {verb} resource '
                f'"{resource}" in API group ""{where}',
                kind=resource,
            )

    @staticmethod
    async def _body(request: web.Request) -> Any:
        try:
            return json.loads(await request.read() or b"null")
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"the request body is not JSON: {e}") from e

    def _list_kind(self, resource: str) -> dict[str, str]:
        api_version, kind, _ = self.store.resources[resource]
        return {"apiVersion": api_version, "kind": f"{kind}List"}

    # ---------------------------------------------------------------- discovery

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response(VERSION)

    async def _discovery(self, request: web.Request) -> web.Response:
        path = request.path.rstrip("/")
        served = self.store.resources
        if path == "/api":
            return web.json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if path == "/apis":
            groups = []
            for group_version in sorted({api for api, _, _ in served.values() if "/" in api}):
                group, version = group_version.split("/")
                entry = {"groupVersion": group_version, "version": version}
                groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
            return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        group_version = path.removeprefix("/apis/").removeprefix("/api/")
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        resources: list[dict[str, Any]] = [
            {"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs}
            for name, (api_version, kind, namespaced) in served.items()
            if api_version == group_version
        ]
        for listed in resources:  # what kubectl resolves short names and categories with
            crd = self.store.custom.get(listed["name"])
            if crd is not None:
                listed["singularName"] = crd.singular
                listed["shortNames"], listed["categories"] = list(crd.short_names), list(crd.categories)
        if not resources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        subresources = [("pods/log", "Pod", ["get"])] if group_version == "v1" else []
        for plural, kind in self.store.custom.items():
            if kind.api_version == group_version:
                subresources += [(f"{plural}/status", kind.kind, ["get", "patch", "update"])] if kind.status else []
                subresources += [(f"{plural}/scale", "Scale", ["get", "patch", "update"])] if kind.scale else []
        resources += [{"name": name, "singularName": "", "namespaced": True, "kind": kind, "verbs": verbs}
                      for name, kind, verbs in subresources]  # fmt: skip
        return web.json_response({"kind": "APIResourceList", "groupVersion": group_version, "resources": resources})

    # ---------------------------------------------------------------- collections and items

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        resource = request.match_info.get("resource", "namespaces")
        namespace = request.match_info.get("ns")
        store = self.store
        if request.method == "POST":
            self._check("create", resource, namespace, request)
            body = await self._body(request)
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the body must be an object")
            if resource == "pods":
                psa.admit_pod(store.objects.get(("namespaces", "", namespace or "")), body)  # 403 PodSecurity
                quota.admit_pod(store, namespace or "", body)  # 403 "exceeded quota", as the admission plugin
            created = store.create(resource, namespace or "", body)
            return web.json_response(created, status=201)
        if request.method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on a collection")
        query = request.query
        watching = query.get("watch", "").lower() in ("true", "1")
        self._check("watch" if watching else "list", resource, namespace, request)
        labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
        if watching:
            return await self._watch(request, resource, namespace, labels, fields)
        stored, revision = store.list(resource, namespace, labels=labels, fields=fields, copies=False)
        stored, revision, token = self._page(stored, revision, query)
        # as the real server: list items carry no kind or apiVersion (the stored objects are serialized at once,
        # before anything else runs on this loop, so they need no copy)
        if resource in store.custom and _wants_table(request):
            return web.json_response(custom.table(store.custom[resource], stored, str(revision)))
        items = [{k: v for k, v in obj.items() if k not in ("kind", "apiVersion")} for obj in stored]
        meta: dict[str, Any] = {"resourceVersion": str(revision)}
        if token:
            meta["continue"] = token
        listing = {**self._list_kind(resource), "metadata": meta, "items": items}
        return web.json_response(listing)

    def _page(self, stored: list[dict[str, Any]], revision: int, query: Any) -> tuple[list[dict[str, Any]], int, str]:
        """One page of a listing: (its items, its resourceVersion, the continue token of the next, or "").
        ``resourceVersion=0`` is served whole, as the real server serves it from its watch cache."""
        limit = int(query["limit"]) if query.get("limit", "").isdigit() else 0
        if query.get("continue"):
            try:
                state = json.loads(base64.b64decode(query["continue"]))
                after, revision = str(state["after"]), int(state["rv"])
            except (ValueError, KeyError, TypeError) as e:
                raise ApiError(400, "BadRequest", f"invalid continue token: {e}") from e
            self.store.compact()
            if revision < self.store.compacted:
                raise ApiError(
                    410, "Expired", "The provided continue parameter is too old to display a consistent list result. "
                    "You can start a new list without the continue parameter.",
                )  # fmt: skip
            stored = [o for o in stored if _key(o) > after]
        if limit <= 0 or query.get("resourceVersion") == "0" or len(stored) <= limit:
            return stored, revision, ""
        page = stored[:limit]
        token = base64.b64encode(json.dumps({"after": _key(page[-1]), "rv": revision}).encode()).decode()
        return page, revision, token

    async def _watch(
        self, request: web.Request, resource: str, namespace: str | None, labels: str, fields: str
    ) -> web.StreamResponse:
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            watcher = self.store.watch(resource, namespace, since=request.query.get("resourceVersion", ""),
                                       labels=labels, fields=fields)  # fmt: skip
        except ApiError as e:  # as the real server: a 200 stream with one ERROR event
            await response.write(json.dumps({"type": "ERROR", "object": e.status()}).encode() + b"\n")
            await response.write_eof()
            return response
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout
        asked = request.query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        bookmark_s = self.bookmark_s if asked else None
        api_version, kind, _ = self.store.resources[resource]
        try:
            while (remaining := give_up - loop.time()) > 0:
                wait = min(remaining, bookmark_s) if bookmark_s is not None else remaining
                try:
                    event = await asyncio.wait_for(watcher.queue.get(), wait)
                except TimeoutError:
                    if bookmark_s is not None:  # quiet, or the end: tell the watcher how far the history went
                        rv = {"resourceVersion": str(self.store.revision)}
                        mark = {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": rv}}
                        await response.write(json.dumps(mark).encode() + b"\n")
                    continue
                if event is None:
                    break
                line = json.dumps({"type": event.type, "object": event.obj}, separators=(",", ":"))
                await response.write(line.encode() + b"\n")
        except ConnectionError:  # the client went away
            return response
        finally:
            self.store.unwatch(watcher)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _item(self, request: web.Request) -> web.Response:
        resource, namespace, name = request.match_info["resource"], request.match_info["ns"], request.match_info["name"]
        return await self._one(request, resource, namespace, name)

    async def _namespace_item(self, request: web.Request) -> web.Response:
        return await self._one(request, "namespaces", "", request.match_info["name"])

    async def _cluster_item(self, request: web.Request) -> web.Response:
        return await self._one(request, request.match_info["resource"], "", request.match_info["name"])

    async def _subresource(self, request: web.Request) -> web.Response:
        """``status`` and ``scale`` of custom objects."""
        info = request.match_info
        resource, namespace, name, sub = info["resource"], info["ns"], info["name"], info["sub"]
        if sub not in ("status", "scale") or resource not in self.store.custom:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        verb = {"GET": "get", "PATCH": "patch", "PUT": "update"}.get(request.method)
        if verb is None:
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on {sub}")
        self._check(verb, f"{resource}/{sub}", namespace, request)
        store = self.store
        if sub == "scale":
            current = store.scale(resource, namespace, name)
            if verb == "get":
                return web.json_response(current)
            body = await self._body(request)
            if verb == "patch":
                self._merge_patch_type(request, custom=True)
                body = merge_patch(current, body) if isinstance(body, dict) else body
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the body must be an object")
            return web.json_response(store.scale(resource, namespace, name, body))
        if verb == "get":
            return web.json_response(store.get(resource, namespace, name))
        body = await self._body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body must be an object")
        if verb == "update":
            return web.json_response(store.replace(resource, namespace, name, body, sub="status"))
        strategic = self._merge_patch_type(request, custom=True)
        return web.json_response(store.patch(resource, namespace, name, body, strategic=strategic, sub="status"))

    @staticmethod
    def _merge_patch_type(request: web.Request, *, custom: bool) -> bool:
        """Whether the patch is strategic; 415 for a patch type the server does not take (custom resources take no
        strategic merge patch, as on the real server)."""
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        allowed = ("application/merge-patch+json",) + (() if custom else ("application/strategic-merge-patch+json",))
        if content_type not in allowed:
            raise ApiError(415, "UnsupportedMediaType", f"the fake API server does not take {content_type!r} patches")
        return content_type == "application/strategic-merge-patch+json"

    async def _one(self, request: web.Request, resource: str, namespace: str, name: str) -> web.Response:
        store, method = self.store, request.method
        verb = {"GET": "get", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(method)
        if verb is None:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on an object")
        self._check(verb, resource, namespace or None, request)
        if method == "GET":
            found = store.get(resource, namespace, name)
            if resource in store.custom and _wants_table(request):
                return web.json_response(
                    custom.table(store.custom[resource], [found], found["metadata"]["resourceVersion"])
                )
            return web.json_response(found)
        if method == "DELETE":
            grace = request.query.get("gracePeriodSeconds")
            body = await self._body(request) if request.can_read_body else None
            if isinstance(body, dict) and body.get("gracePeriodSeconds") is not None:
                grace = str(body["gracePeriodSeconds"])
            if resource == "pods":
                return web.json_response(await self._delete_pod(namespace, name, int(grace) if grace else None))
            return web.json_response(store.delete(resource, namespace, name))
        body = await self._body(request)
        if method == "PUT":
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the body must be an object")
            return web.json_response(store.replace(resource, namespace, name, body))
        strategic = self._merge_patch_type(request, custom=resource in store.custom)
        return web.json_response(store.patch(resource, namespace, name, body, strategic=strategic))

    async def _log(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["ns"], request.match_info["name"]
        self._check("get", "pods", namespace)
        tail = request.query.get("tailLines")
        text = await self._logs(namespace, name, int(tail) if tail and tail.isdigit() else None)
        return web.Response(text=text, content_type="text/plain")


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _wants_table(request: web.Request) -> bool:
    """Whether the client asks for server-side printing (kubectl get: ``Accept: ...;as=Table;...``)."""
    return "as=Table" in request.headers.get("Accept", "")
