"""Every CLI command that names a run reaches a named tenant's run three ways: ``--api URL``,
AGENTMILL_API_URL, and straight to Redis with ``--tenant``; and what ``--json`` prints is the
API's camelCase wire form on both paths. A real API (auth on, a token naming tenant ``acme``, an
AGENTMILL_ID_SECRET), a worker, runs submitted through the API as ``acme``; the CLI as a subprocess."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.client import AsyncClient
from agentmill_client.models import run_at_ms
from tests.integration.helpers import running_worker, script_run
from tests.integration.test_cli_submit import api_at
from tests.integration.test_client_tools import crm_run, profiles
from tests.support.cli import cli

pytestmark = pytest.mark.integration

SECRET = "cli-tenants-secret"
Way = tuple[tuple[str, ...], dict[str, str]]  # the flags, the environment


@asynccontextmanager
async def acme_pool(
    redis_url: str, tmp_path: Path
) -> AsyncIterator[tuple[AsyncClient, list[Way], dict[str, str]]]:
    """The API (token ``tok`` is tenant ``acme``) and a worker; the client as ``acme``, the three
    ways to it, and the environment every CLI call has (the id secret and the profiles)."""
    path = profiles(tmp_path)
    base = {"AGENTMILL_ID_SECRET": SECRET, "AGENTMILL_PROFILES": path}
    async with (
        api_at(redis_url, auth_disabled=False, api_tokens="tok=acme", id_secret=SECRET, profiles=path) as url,
        running_worker(redis_url, profiles=path),
        AsyncClient(url, token="tok") as c,
    ):
        ways: list[Way] = [
            (("--api", url, "--token", "tok"), base),
            ((), {**base, "AGENTMILL_API_URL": url, "AGENTMILL_TOKEN": "tok"}),
            (("--tenant", "acme"), {**base, "AGENTMILL_API_URL": url}),  # --tenant means Redis
        ]
        yield c, ways, base


async def each_way(
    redis_url: str, ways: list[Way], *calls: tuple[str, ...]
) -> list[subprocess.CompletedProcess[str]]:
    """``calls[i]`` (or the one call) made the ``i``-th way, side by side."""
    argv = calls if len(calls) == len(ways) else calls * len(ways)
    return await asyncio.gather(
        *(
            asyncio.to_thread(cli, redis_url, *a, *flags, env=env)
            for a, (flags, env) in zip(argv, ways, strict=True)
        )
    )


def one_json(out: subprocess.CompletedProcess[str]) -> Any:
    """stdout holds exactly one JSON document (one line), the command succeeded."""
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1, out.stdout
    return orjson.loads(lines[0])


async def until(c: AsyncClient, run_id: str, status: str) -> None:
    for _ in range(400):
        if (await c.get(run_id)).status == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{run_id} never reached {status}")


APPROVALS = [{"id": f"a{i}", "name": "echo", "arguments": {"text": str(i)}} for i in range(3)]


async def parked_run(c: AsyncClient) -> str:
    """A run of ``acme`` waiting for three approvals (c1.0, c1.1, c1.2)."""
    run_id = (await c.submit(script_run([{"toolCalls": APPROVALS}, {"text": "done"}], runId="approve-me",
                                        toolPolicy={"requireApprovalByDefault": True}))).run_id  # fmt: skip
    assert run_id == "approve-me"  # the client's id; Redis keeps the run under the tenant's key of it
    await until(c, run_id, "awaiting_human")
    return run_id


async def test_status_approve_and_reject_reach_a_named_tenants_run_each_way(
    redis_url: str, tmp_path: Path
) -> None:
    async with acme_pool(redis_url, tmp_path) as (c, ways, base):
        parked = await parked_run(c)
        # Redis without the tenant does not find it: the tenant is what reaches it.
        bare = await asyncio.to_thread(cli, redis_url, "status", parked, "--redis", env=base)
        assert bare.returncode == 2 and f"error: no run {parked}" in bare.stderr

        for out in await each_way(redis_url, ways, ("status", parked, "--json")):
            view = one_json(out)
            assert (view["runId"], view["status"]) == (parked, "awaiting_human")
            assert [p["toolCallId"] for p in view["pendingApprovals"]] == ["c1.0", "c1.1", "c1.2"]

        decided = await each_way(redis_url, ways, ("approve", parked, "c1.0", "--json"),
                                 ("approve", parked, "c1.1", "--json"), ("reject", parked, "c1.2", "--json"))  # fmt: skip
        answers = [one_json(o) for o in decided]
        assert all(a["runId"] == parked for a in answers)
        assert sorted(a["results"][0]["result"] for a in answers) == ["recorded", "recorded", "resumed"]
        await until(c, parked, "completed")


async def test_tool_results_abort_and_retry_reach_a_named_tenants_runs_each_way(
    redis_url: str, tmp_path: Path
) -> None:
    client_calls = [{"id": f"b{i}", "name": "browser_open", "arguments": {}} for i in range(3)]
    browser = {"name": "browser_open", "parameters": {"type": "object"}, "execution": "client"}
    later = run_at_ms("2099-01-01T00:00:00Z")
    async with acme_pool(redis_url, tmp_path) as (c, ways, _):
        waiting = (await c.submit(crm_run([{"toolCalls": client_calls}, {"text": "ok"}], runId="tools-me",
                                          clientTools=[browser]))).run_id  # fmt: skip
        queued = [
            (await c.submit(script_run([{"text": "x"}], runId=f"q{i}", runAt=later))).run_id for i in range(3)
        ]
        await until(c, waiting, "awaiting_tools")
        posted = await each_way(redis_url, ways, *(("tool-result", waiting, f"c1.{i}", "--content", f"page {i}",
                                                    "--json") for i in range(3)))  # fmt: skip
        answers = [one_json(o) for o in posted]
        assert sorted(a["results"][0]["result"] for a in answers) == ["recorded", "recorded", "recorded"]
        assert sum(a["resumed"] for a in answers) == 1

        aborted = await each_way(redis_url, ways, *(("abort", q, "--json") for q in queued))
        assert [one_json(o) for o in aborted] == [{"runId": q, "result": "aborted"} for q in queued]
        retried = await each_way(redis_url, ways, *(("retry", q, "--json") for q in queued))
        assert all(one_json(o)["runId"] not in queued for o in retried)
        unknown = await each_way(redis_url, ways, ("abort", "no-such-run"))
        for out in unknown:
            said = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
            assert out.returncode == 2 and len(said) == 1 and "no run no-such-run" in said[0], out.stderr


async def test_tail_and_fork_reach_a_named_tenants_run_each_way(redis_url: str, tmp_path: Path) -> None:
    async with acme_pool(redis_url, tmp_path) as (c, ways, _):
        done = (
            await c.submit(script_run([{"toolCalls": APPROVALS[:1]}, {"text": "done"}], runId="tail-me"))
        ).run_id
        await until(c, done, "completed")
        for out in await each_way(redis_url, ways, ("tail", done, "--json")):
            assert out.returncode == 0, out.stderr
            events = [orjson.loads(line) for line in out.stdout.splitlines()]
            assert {e["runId"] for e in events} == {done}
            assert events[-1]["kind"] == "status" and events[-1]["payload"]["status"] == "completed"
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        forks = [
            one_json(o) for o in await each_way(redis_url, ways, ("fork", done, "--at-seq", "1", "--json"))
        ]
        assert len({f["runId"] for f in forks} - {done}) == 3


async def test_json_is_the_wire_form_on_both_paths(redis: Redis, redis_url: str, tmp_path: Path) -> None:
    async with acme_pool(redis_url, tmp_path) as (c, ways, _):
        batch = await c.create_batch(
            [script_run([{"text": "a"}]), script_run([{"text": "b"}])], batch_id="b1"
        )
        assert batch.batch_id == "b1"
        for _ in range(200):
            if (await c.get_batch("b1")).finished:
                break
            await asyncio.sleep(0.05)
        api, _, direct = [
            one_json(o) for o in await each_way(redis_url, ways, ("batch", "status", "b1", "--json"))
        ]
        assert api == direct and api["done"] == 2 and "createdAt" in api  # camelCase both ways

        template = tmp_path / "input.json"
        template.write_bytes(orjson.dumps(script_run([{"text": "tick"}])))
        created = one_json(await asyncio.to_thread(
            cli, redis_url, "schedule", "create", str(template), "--cron", "0 9 * * *", "--id", "s1", "--json",
            *ways[0][0], env=ways[0][1]))  # fmt: skip
        assert created["scheduleId"] == "s1" and created["nextFireTimes"]
        got = [one_json(o) for o in await each_way(redis_url, ways, ("schedule", "get", "s1", "--json"))]
        assert {g["scheduleId"] for g in got} == {"s1"} and got[0]["cron"] == got[2]["cron"] == "0 9 * * *"
        for out in await each_way(redis_url, ways, ("runs", "ls", "--json", "--batch", "b1")):
            rows = [orjson.loads(line) for line in out.stdout.splitlines()]
            assert out.returncode == 0 and len(rows) == 2 and all("createdAt" in r for r in rows), out.stdout
