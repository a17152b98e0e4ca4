"""The agent of simulated pods (mode "simulate" with ``agents=True``): one TCP server on 127.0.0.1 that answers the
agent protocol for every simulated pod, so the control plane's own path to a pod's agent (its IP from the pod, its
token from the pod's Secret, the hello, pooled connections, health probes) runs at scale with no container.

What it does, and no more:

- simulated pods then get the IP 127.0.0.1 (all of them: the server tells them apart by their tokens);
- a hello is accepted only with the token of a Secret that a pod of the store mounts (the per-sandbox agent Secret);
  any other token is refused with ``unauthenticated``, as the real agent does;
- ``ping`` and ``health`` are answered (health: one check, ``simulated``, passing) while that pod is Running and not
  being deleted and Ready; once it is not (node lost, evicted, deleted), the connection is closed, as a dead pod's
  would be;
- every other operation is refused with ``unavailable``: nothing runs in a simulated pod.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from typing import Any

from sandbox.protocol import HELLO_OP, PROTOCOL_VERSION, ErrorCode, FrameError, encode_frame, read_frame
from sandbox.testing.fake_kube.objects import Event, ObjectStore

SIMULATED_IP = "127.0.0.1"


class SimAgent:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.port = 0
        self._tokens: dict[str, tuple[str, str]] = {}
        """base64 of a token -> (namespace, secret name)."""
        self._mounts: dict[tuple[str, str], str] = {}
        """(namespace, secret name) -> the pod that mounts it."""
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.StreamWriter, asyncio.Task[None] | None] = {}
        self.requests = 0

    async def start(self) -> int:
        for (resource, namespace, _), obj in list(self.store.objects.items()):
            if resource in ("secrets", "pods"):
                self._index(Event(0, "ADDED", resource, namespace, obj))
        self.store.event_hooks.append(self._index)
        self._server = await asyncio.start_server(self._serve, SIMULATED_IP, 0, limit=1 << 20, backlog=4096)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def _index(self, event: Event) -> None:
        meta = event.obj.get("metadata") or {}
        if event.resource == "secrets":
            token = (event.obj.get("data") or {}).get("token")
            if token and event.type != "DELETED":
                self._tokens[token] = (event.namespace, meta.get("name", ""))
            elif token:
                self._tokens.pop(token, None)
        elif event.resource == "pods":
            for volume in (event.obj.get("spec") or {}).get("volumes") or []:
                secret = (volume.get("secret") or {}).get("secretName")
                if secret and event.type == "DELETED":
                    self._mounts.pop((event.namespace, secret), None)
                elif secret:
                    self._mounts[(event.namespace, secret)] = meta.get("name", "")

    def _pod_of(self, token: str) -> tuple[str, str] | None:
        secret = self._tokens.get(base64.b64encode(token.encode()).decode())
        pod = self._mounts.get(secret) if secret else None
        return (secret[0], pod) if secret and pod else None

    def _running(self, namespace: str, pod: str) -> bool:
        obj = self.store.objects.get(("pods", namespace, pod))
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return False
        status = obj.get("status") or {}
        unready = any(c.get("type") == "Ready" and c.get("status") == "False" for c in status.get("conditions") or [])
        return status.get("phase") == "Running" and not unready  # not Ready: its node is lost, nothing answers

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections[writer] = asyncio.current_task()
        try:
            header, _ = await read_frame(reader, skip_oversized=False)
            token = str((header.get("args") or {}).get("token") or "")
            pod = self._pod_of(token) if header.get("op") == HELLO_OP else None
            if pod is None:
                await _answer(writer, error=(ErrorCode.UNAUTHENTICATED, "the token is not this sandbox's"))
                return
            await _answer(writer, {"protocol": PROTOCOL_VERSION})
            while True:
                header, _ = await read_frame(reader)
                if not self._running(*pod):
                    return  # a dead pod answers nothing
                self.requests += 1
                op = header.get("op")
                if op == "ping":
                    await _answer(writer, {})
                elif op == "health":
                    await _answer(writer, {"ok": True, "checks": {"simulated": {"ok": True, "detail": "simulated"}}})
                else:
                    await _answer(writer, error=(ErrorCode.UNAVAILABLE, f"a simulated pod runs no sandbox ({op})"))
        except (asyncio.IncompleteReadError, ConnectionError, FrameError):
            return
        finally:
            writer.close()
            self._connections.pop(writer, None)

    async def close(self) -> None:
        """Stop listening; close every connection (each one's handler then ends at its next read)."""
        if self._server is not None:
            self._server.close()
        open_now = dict(self._connections)
        for writer in open_now:
            writer.close()
        await asyncio.gather(*(t for t in open_now.values() if t is not None), return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()


async def _answer(
    writer: asyncio.StreamWriter, result: dict[str, Any] | None = None, *, error: tuple[str, str] | None = None
) -> None:
    if error is not None:
        frame = encode_frame({"ok": False, "error": {"code": error[0], "message": error[1]}})
    else:
        frame = encode_frame({"ok": True, "result": result or {}})
    writer.write(frame)
    await writer.drain()
