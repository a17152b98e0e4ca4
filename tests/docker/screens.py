"""Screens as the agent sees them, for tests that compare its screenshots with the truth."""

from __future__ import annotations

import asyncio
import io

from PIL import Image

from sandbox.backends.agent_client import AgentClient


async def settled_screen(agent: AgentClient, width: int, height: int) -> bytes:
    """The RGB pixels of the whole screen through the region path (every pixel copied and encoded afresh, nothing
    reused from an earlier frame), once two in a row agree."""
    whole = {"format": "png", "region": {"x": 0, "y": 0, "width": width, "height": height}}
    last = b""
    for _ in range(50):
        _, data = await agent.request("screenshot", whole, deadline=10)
        pixels = Image.open(io.BytesIO(data)).convert("RGB").tobytes()
        if pixels == last:
            return pixels
        last = pixels
        await asyncio.sleep(0.1)
    raise AssertionError("the screen never settled")
