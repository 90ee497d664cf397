"""The peers figure's "agent job", the same on every system: read the input, one simulated model
reply that takes 0 ms, return a result for the system to store as it stores results."""

from __future__ import annotations

import asyncio
from typing import Any


def job_input(i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "bench"}], "i": i}


async def model_reply(messages: list[dict[str, Any]]) -> str:
    await asyncio.sleep(0)  # the simulated model: 0 ms, one yield to the loop
    return "hi"


async def agent_step(inp: dict[str, Any]) -> dict[str, Any]:
    reply = await model_reply(inp["messages"])
    return {"i": inp["i"], "text": reply}
