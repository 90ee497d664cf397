"""A tenant's JSON Schema through the API and a real Redis and worker: a schema past a bound is a
422 naming it (responseFormat and a client tool's parameters, one run and a batch), and a
backtracking pattern in responseFormat costs the worker nothing: the run ends as fast as any."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.api_support import A, api, settings
from tests.integration.helpers import producer_for, script_run, wait_all
from tests.support.schemas import REDOS, REDOS_TEXT, doubling, wide
from worker.process.jobs import WorkerProcess

pytestmark = pytest.mark.integration


def rf(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "jsonSchema": {"name": "out", "schema": schema}}


async def test_a_doubling_schema_is_a_422_naming_the_bound(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as http:
        # A schema of 512 B or more is checked in a process of its own, started at the first such
        # schema (seconds of imports at a lower priority on a busy machine): started first, so that
        # what is timed is the doubling schema's refusal, whose expansion (2**20) would never end.
        warm = await http.post("/v1/runs", json=script_run([], responseFormat=rf(wide(20, tag="warm"))))
        assert warm.status_code == 202, warm.text
        t0 = time.monotonic()
        r = await http.post("/v1/runs", json=script_run([], responseFormat=rf(doubling())))
        assert time.monotonic() - t0 < 2
        err = r.json()["error"]
        assert r.status_code == 422 and err["code"] == "schema_too_complex", r.text
        assert err["field"] == "responseFormat.jsonSchema.schema" and "(bound: branches)" in err["message"]
        tool = {"name": "lookup", "parameters": {"type": "object", **doubling()}}
        r = await http.post("/v1/runs", json=script_run([], clientTools=[tool]))
        err = r.json()["error"]
        assert r.status_code == 422 and err["field"] == "clientTools.0.parameters", r.text
        back = {"name": "lookup", "parameters": {"type": "string", "pattern": "(a)\\1"}}
        r = await http.post("/v1/runs/batch", json={"runs": [script_run([], clientTools=[back])]})
        got = r.json()["results"][0]["error"]
        assert got["code"] == "schema_too_complex" and "backreferences" in got["message"], r.text
        assert got["field"] == "runs.0.clientTools.0.parameters"


async def test_a_backtracking_pattern_does_not_stall_the_worker(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": REDOS}}, "required": ["s"]}
    p = producer_for(redis, redis_url)
    t0 = time.monotonic()
    sub = await p.submit(script_run([{"json": {"s": REDOS_TEXT}}] * 3, responseFormat=rf(schema)))
    rec = (await wait_all(p, [sub.run_id], 15))[sub.run_id]
    assert time.monotonic() - t0 < 10
    assert rec.status.value == "failed" and rec.result.last_error.code == "invalid_output"
    assert "does not match" in rec.result.last_error.message
    ok = await p.submit(script_run([{"json": {"s": "a" * 41}}], responseFormat=rf(schema)))
    rec = (await wait_all(p, [ok.run_id], 15))[ok.run_id]
    assert rec.status.value == "completed" and rec.result.output == {"s": "a" * 41}
