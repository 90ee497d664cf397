"""Figure 9's other attacks, one at a time, each from its own process (as bench/attack.py):
``python -m bench.attack_kinds KIND URL TOKEN SECONDS``, KIND one of ATTACKS. It prints ``ready``
once what the attack needs is in place (the run to fork), attacks for SECONDS, prints ``over``, aborts
the tenant's runs still active and deletes its schedules (so the next attack starts on an idle
pool), and prints what it sent as JSON: requests by status code, and the errors of its tasks.

- schema: runs whose responseFormat checks the scripted model's answer (41 ``a`` and a ``b``) against the
  backtracking pattern ``^(a|aa)*$``, and runs whose schema doubles at each ``$ref``/``allOf`` level.
- fork: forks, at its last event, of a run whose transcript is 0.9 MB.
- schedule: every-second schedules, created as fast as the API takes them, until SCHEDULES.
- child: runs of ``fan0``, whose model calls FAN sub-agents (``fan1``), each calling FAN (``fan2``).
- mcp: runs of ``flood``, whose MCP server (bench/mcp_flood.py) lists FLOOD_TOOLS tools of
  FLOOD_DESCRIPTION characters each and answers FLOOD_ANSWER characters; each run calls it twice.

``profiles(mcp_url)`` is the profile file the worker and the API load for them (test-only scripted
models: AGENTMILL_DEV_PROFILES=true).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

from tests.support.schemas import REDOS, REDOS_TEXT, doubling

ATTACKS = ("schema", "fork", "schedule", "child", "mcp")
PARALLEL = 4  # submitting tasks of the run attacks
SCHEDULES = 500
FAN = 8  # children per run of the child attack: FAN + FAN**2 runs per root
# An MCP server's listing and answers are bounded by a fix not on main yet: these sizes keep the
# worker's memory in hand while still a hundred times what a usual server sends.
FLOOD_TOOLS = 1_000
FLOOD_DESCRIPTION = 2_000  # about 2 MB of listing
FLOOD_ANSWER = 1_000_000
MESSAGES, MESSAGE_CHARS = 9, 100_000  # the forked run's transcript: 0.9 MB (a run input's bound is 1 MB)
ACTIVE = ("queued", "running", "awaiting_children", "awaiting_tools", "awaiting_human")


def profiles(mcp_url: str) -> dict[str, Any]:
    scripted = {"kind": "scripted", "mode": "script"}

    def fan(name: str, child: str | None) -> dict[str, Any]:
        if child is None:
            return {"name": name, "provider": {**scripted, "script": [{"text": "leaf"}]}}
        calls = [{"name": "ask", "arguments": {"task": f"part {i}"}} for i in range(FAN)]
        return {"name": name, "agentTools": [{"agent": child, "name": "ask"}],
                "provider": {**scripted, "script": [{"toolCalls": calls}, {"text": "done"}]}}  # fmt: skip

    big = [{"name": "flood__big", "arguments": {}}] * 2
    flood = {"name": "flood", "provider": {**scripted, "script": [{"toolCalls": big}, {"text": "done"}]},
             "mcpServers": [{"name": "flood", "url": mcp_url, "allowHosts": ["127.0.0.1"], "toolsTtlS": 0}]}  # fmt: skip
    return {"profiles": [fan("fan0", "fan1"), fan("fan1", "fan2"), fan("fan2", None), flood]}


def _run(script: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"agent": "scripted", "inputMessages": [{"role": "user", "content": "go"}],
            "runtimeHints": {"script": script}, **extra}  # fmt: skip


def _profile_run(agent: str) -> dict[str, Any]:
    """A run of a profile whose model follows the profile's own script."""
    return {"agent": agent, "inputMessages": [{"role": "user", "content": "go"}]}


def _rf(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "jsonSchema": {"name": "out", "schema": schema}}


REDOS_RUN = _run(
    [{"json": {"s": REDOS_TEXT}}] * 3,
    responseFormat=_rf({"type": "object", "properties": {"s": {"type": "string", "pattern": REDOS}}}),
)
DOUBLING_RUN = _run([{"json": {}}], responseFormat=_rf(doubling()))


async def _loop(
    until: float, send: Callable[[int], Any], sent: Counter[str], pause: float, limit: int | None
) -> None:
    i = 0
    while time.monotonic() < until and (limit is None or i < limit):
        r = await send(i)
        sent[str(r.status_code)] += 1
        if r.status_code == 429:  # the tenant's quota: as a client would, wait as told (briefly)
            await asyncio.sleep(min(float(r.headers.get("Retry-After", "1")), 1.0))
        i += 1
        await asyncio.sleep(pause)


async def _ended(c: httpx.AsyncClient, run_id: str, within: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        view: dict[str, Any] = (await c.get(f"/v1/runs/{run_id}")).json()
        if view.get("status") in ("completed", "failed", "aborted") or time.monotonic() > deadline:
            return view
        await asyncio.sleep(0.2)


async def attack(kind: str, c: httpx.AsyncClient, seconds: float, sent: Counter[str]) -> None:
    parallel, pause = PARALLEL, 0.0
    if kind == "schema":
        bodies = (REDOS_RUN, DOUBLING_RUN)
        send = lambda i: c.post("/v1/runs", json=bodies[i % 2])  # noqa: E731
    elif kind == "fork":
        big = [{"role": "user", "content": f"{i % 10}" * MESSAGE_CHARS} for i in range(MESSAGES)]
        made = await c.post("/v1/runs", json={**_run([{"text": "done"}]), "inputMessages": big})
        view = await _ended(c, made.json()["runId"])
        sent["transcript_events"] = view["lastSeq"]
        send = lambda i: c.post(f"/v1/runs/{view['runId']}/fork", json={"atSeq": view["lastSeq"]})  # noqa: E731
    elif (
        kind == "schedule"
    ):  # each created once (one task, so the ids are not taken twice), then left to fire
        fast = {"cron": "* * * * * *", "input": {"inputMessages": [{"role": "user", "content": "1+1"}]}}
        send = lambda i: c.post("/v1/schedules", json={**fast, "scheduleId": f"flood-{i}"})  # noqa: E731
        parallel = 1
    elif kind == "child":  # a root every half second: the load is in its children
        send = lambda i: c.post("/v1/runs", json=_profile_run("fan0"))  # noqa: E731
        parallel, pause = 1, 0.5
    elif kind == "mcp":
        send = lambda i: c.post("/v1/runs", json=_profile_run("flood"))  # noqa: E731
    else:
        raise SystemExit(f"no attack {kind!r}: one of {', '.join(ATTACKS)}")
    print("ready", flush=True)
    until = time.monotonic() + seconds
    limit = SCHEDULES if kind == "schedule" else None
    await asyncio.gather(*(_loop(until, send, sent, pause, limit) for _ in range(parallel)))
    if kind == "schedule":
        await asyncio.sleep(max(0.0, until - time.monotonic()))  # the schedules fire meanwhile
    print("over", flush=True)


async def clean_up(c: httpx.AsyncClient) -> int:
    """Abort the tenant's active runs (a parent's abort reaches its children) and delete its schedules."""
    for s in (await c.get("/v1/schedules", params={"limit": 1000})).json().get("schedules", []):
        await c.delete(f"/v1/schedules/{s['scheduleId']}")
    aborted = 0
    for status in ACTIVE:
        for run in (await c.get("/v1/runs", params={"status": status, "limit": 500})).json().get("runs", []):
            await c.post(f"/v1/runs/{run['runId']}/abort")
            aborted += 1
    return aborted


async def main(kind: str, base: str, token: str, seconds: float) -> None:
    sent: Counter[str] = Counter()
    errors: list[str] = []
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as c:
        try:
            await attack(kind, c, seconds, sent)
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            errors.append(repr(exc))
        aborted = await clean_up(c)
    print(json.dumps({"sent": dict(sent), "aborted": aborted, "errors": errors[:3]}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
