"""Direct lanes: an SDK steps the sandbox without the control plane in the path (docs/lanes.md).

The control plane grants a lane (``lane_grant``: the SHA-256 of a ticket it handed its caller, how long it holds and
which action types it carries) and may revoke every lane (``lane_revoke``: a reset, an episode's start, a delete).
A connection that presents a granted ticket in its hello serves ``lane_step`` only: one action (a command or a
computer action), and a screenshot after it if asked. Every step is checked against its grant (a revoked or expired
lane does nothing and says so) and noted in a ledger the control plane reads on its own rounds (``lane_report``),
so its metrics, recent actions, command output and idle time see every step, a round late.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sandbox.agent.errors import AgentError, bad_request, require
from sandbox.protocol import ErrorCode

Handler = Callable[[dict[str, Any], bytes], Any]

LEDGER_STEPS = 4096
"""Steps the ledger holds between two reports; older ones are counted (``dropped``) but not kept."""
LEDGER_BYTES = 1 << 20
"""About the most the ledger's steps take (their actions and output): a sandbox's memory is not the ledger's."""
OUTPUT_CHARS = 2048
"""The most of each stream of a command's output the ledger keeps (the control plane keeps a tail, not all)."""
MAX_GRANTS = 64
"""Grants held at once; a new one past this replaces the one closest to expiring."""
MAX_TTL_S = 24 * 3600.0
EXEC_FIELDS = ("cmd", "timeout", "cwd", "env", "session", "keep_background")
"""The fields of an ``exec`` action the agent's ``exec`` op takes."""


@dataclass(frozen=True, slots=True)
class Grant:
    expires_at: float
    """time.monotonic() after which the lane does nothing."""
    actions: frozenset[str]


class LaneRefused(AgentError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNAUTHENTICATED, message)


class Lanes:
    def __init__(self, ops: dict[str, Handler]) -> None:
        """``ops``: the agent's op table (a lane step calls its ``exec``, ``action`` and ``screenshot``)."""
        self._ops = ops
        self._grants: dict[bytes, Grant] = {}
        self._ledger: deque[tuple[dict[str, Any], int]] = deque()
        """Each step and about how many bytes it holds."""
        self._ledger_bytes = 0
        self._seq = 0
        self._connections: set[asyncio.StreamWriter] = set()

    # ------------------------------------------------------------------ the control plane's ops

    async def grant(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        digest = require(args, "digest", str)
        ttl = args.get("ttl_s")
        actions = args.get("actions")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl <= MAX_TTL_S:
            raise bad_request(f"ttl_s must be a number of seconds in (0, {MAX_TTL_S:g}]")
        if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
            raise bad_request("actions must be a list of action types")
        try:
            key = bytes.fromhex(digest)
        except ValueError:
            raise bad_request("digest must be hex") from None
        if len(key) != hashlib.sha256().digest_size:
            raise bad_request("digest must be a SHA-256")
        now = time.monotonic()
        self._grants = {k: g for k, g in self._grants.items() if g.expires_at > now}
        while len(self._grants) >= MAX_GRANTS:  # its lane's next step is refused, and opens a lane again
            del self._grants[min(self._grants, key=lambda k: self._grants[k].expires_at)]
        self._grants[key] = Grant(now + float(ttl), frozenset(actions))
        return {"lanes": len(self._grants)}, b""

    async def revoke(self, _args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        """Revoke every lane and hang up on their connections before answering: a client's next step finds its
        connection closed (nothing sent) and asks the control plane for a lane again, which a reset's new instance
        or an episode's refusal answers. A step in flight on one is cut short, as a reset cuts any step short."""
        revoked = len(self._grants)
        self._grants.clear()
        connections, self._connections = list(self._connections), set()
        for writer in connections:
            writer.close()
        for writer in connections:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
        return {"revoked": revoked, "connections": len(connections)}, b""

    @contextlib.contextmanager
    def holding(self, writer: asyncio.StreamWriter) -> Iterator[None]:
        """While a lane's connection is served: a revoke hangs up on it."""
        self._connections.add(writer)
        try:
            yield
        finally:
            self._connections.discard(writer)

    async def report(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        """The steps after ``after`` (a sequence number a report gave), oldest first; ``dropped``: how many of those
        the ledger no longer holds."""
        after = args.get("after", 0)
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise bad_request("after must be a step's sequence number")
        entries = [e for e, _ in self._ledger if e["seq"] > after]
        first = entries[0]["seq"] if entries else self._seq + 1
        return {"seq": self._seq, "dropped": max(0, first - after - 1), "steps": entries}, b""

    # ------------------------------------------------------------------ the lane's side

    def admits(self, ticket: object) -> bool:
        """Whether ``ticket`` opens a lane now (compared by digest in constant time)."""
        if not isinstance(ticket, str) or not ticket:
            return False
        digest, now = _digest(ticket), time.monotonic()
        return any(hmac.compare_digest(key, digest) and g.expires_at > now for key, g in self._grants.items())

    def stepper(self, ticket: str) -> Handler:
        """The ``lane_step`` handler of a connection that presented ``ticket``."""
        digest = _digest(ticket)

        async def step(args: dict[str, Any], blob: bytes) -> tuple[dict[str, Any], bytes]:
            grant = self._grants.get(digest)
            if grant is None or grant.expires_at <= time.monotonic():
                raise LaneRefused("this lane was revoked or has expired: open a new one")
            return await self._step(grant, args)

        return step

    async def _step(self, grant: Grant, args: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """One action and, if asked, a screenshot after it; no action: a screenshot alone (an observe)."""
        action = args.get("action")
        shot = args.get("screenshot")
        if action is None and shot is None:
            raise bad_request("a lane step needs an action, a screenshot, or both")
        if action is not None:
            kind = action.get("type") if isinstance(action, dict) else None
            if not isinstance(kind, str) or kind not in grant.actions:
                raise bad_request(f"action {kind!r} does not go through a lane; send it to the control plane")
        if shot is not None and not isinstance(shot, dict):
            raise bad_request("screenshot must be an object of format and quality")
        clock = time.perf_counter()
        entry: dict[str, Any] = {"at": time.time(), "action": action}
        result: dict[str, Any] = {}
        out = b""
        try:
            if isinstance(action, dict) and action["type"] == "exec":
                ran, out = await self._ops["exec"]({k: action[k] for k in EXEC_FIELDS if k in action}, b"")
                result["exec"] = ran
                entry["exec"] = _summary(ran, out, int(ran["stdout_bytes"]))
            elif action is not None:
                done, _ = await self._ops["action"]({"action": action}, b"")
                if "cursor" in done:
                    result["cursor"] = done["cursor"]
            result["action_ms"] = _ms_since(clock)
            if shot is not None:
                meta, image = await self._ops["screenshot"](shot, b"")
                result["screenshot"] = {**meta, "offset": len(out)}
                out += image
        except AgentError as e:
            entry["error"] = e.code
            raise
        except Exception:
            entry["error"] = ErrorCode.INTERNAL
            raise
        finally:
            entry["ms"] = _ms_since(clock)
            self._note(entry)
        return result, out

    def _note(self, entry: dict[str, Any]) -> None:
        self._seq += 1
        entry["seq"] = self._seq
        size = len(json.dumps(entry["action"])) if entry["action"] is not None else 0
        ran = entry.get("exec")
        if ran is not None:
            size += len(ran["stdout"]) + len(ran["stderr"])
        self._ledger.append((entry, size))
        self._ledger_bytes += size
        while len(self._ledger) > LEDGER_STEPS or (self._ledger_bytes > LEDGER_BYTES and len(self._ledger) > 1):
            self._ledger_bytes -= self._ledger.popleft()[1]


def _digest(ticket: str) -> bytes:
    return hashlib.sha256(ticket.encode("utf-8", errors="surrogatepass")).digest()


def _summary(ran: dict[str, Any], data: bytes, split: int) -> dict[str, Any]:
    """What the control plane keeps of a command's run: its end and the tail of each stream."""
    return {
        "exit_code": ran.get("exit_code"),
        "timed_out": bool(ran.get("timed_out")),
        "duration_ms": ran.get("duration_ms", 0.0),
        "stdout": data[:split][-OUTPUT_CHARS:].decode("utf-8", errors="replace"),
        "stderr": data[split:][-OUTPUT_CHARS:].decode("utf-8", errors="replace"),
    }


def _ms_since(clock: float) -> float:
    return round((time.perf_counter() - clock) * 1000, 3)
