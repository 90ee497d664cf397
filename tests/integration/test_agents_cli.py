"""The Python client's and the CLI's agent calls (``agentmill agents …``), through the API and
straight to Redis: both see and change the same versions of a tenant's agent."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import orjson
import pytest

from agentmill_client.client import AsyncClient
from agentmill_client.errors import ApiError
from tests.integration.api_support import api, settings
from tests.support.cli import cli

pytestmark = pytest.mark.integration


def profile(prompt: str) -> dict[str, object]:
    return {
        "name": "support",
        "provider": {"connection": "calculator"},
        "systemPrompt": prompt,
        "tools": ["calculator"],
    }


async def test_the_client_covers_the_agent_calls(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, AsyncClient(url, token="tok-a") as c:
        v1 = await c.create_agent(profile("one"))
        assert (v1.name, v1.version, v1.profile["systemPrompt"]) == ("support", 1, "one")
        assert (await c.create_agent(profile("two"), current=False)).version == 2
        shown = await c.get_agent("support")
        assert (shown.current_version, shown.latest_version, [s.version for s in shown.versions]) == (
            1,
            2,
            [1, 2],
        )
        assert (await c.ramp_agent("support", 2, 25)).ramp.version == 2  # type: ignore[union-attr]
        assert (await c.set_current_agent_version("support", 2)).current_version == 2
        assert (await c.get_agent_version("support", 1)).profile["systemPrompt"] == "one"
        names = [(a.name, a.source) for a in (await c.list_agents()).agents]
        assert ("support", "tenant") in names and ("default", "operator") in names
        run = await c.submit({"agent": "support@1", "inputMessages": [{"role": "user", "content": "1+1"}]})
        assert (await c.get(run.run_id)).agent_version == 1

        with pytest.raises(ApiError) as info:
            await c.get_agent_version("support", 9)
        assert info.value.status == 404
        assert (await c.delete_agent("support")).latest_version == 2
        with pytest.raises(ApiError) as info:
            await c.get_agent("support")
        assert info.value.status == 404


@pytest.mark.slow  # the CLI's processes start in about 1 s each on a quiet machine
async def test_the_cli_covers_the_agent_calls_each_way(redis_url: str, tmp_path: Path) -> None:
    async with api(settings(redis_url)) as url, AsyncClient(url, token="tok-a") as c:
        await c.create_agent(profile("one"))
        await c.create_agent(profile("two"))
        path = tmp_path / "p.json"
        path.write_text(json.dumps(profile("three")))
        api_way, redis_way = ("--api", url, "--token", "tok-a"), ("--tenant", "tenant-a")

        async def both(*calls: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
            return await asyncio.gather(*(asyncio.to_thread(cli, redis_url, "agents", *a) for a in calls))

        (made,) = await both(("create", str(path), "--json", *api_way))
        assert made.returncode == 0 and orjson.loads(made.stdout)["version"] == 3, made.stderr
        shown_redis, v2 = await both(("show", "support", "--json", *redis_way),
                                     ("show", "support", "--version", "2", "--json", *api_way))  # fmt: skip
        assert orjson.loads(shown_redis.stdout)["currentVersion"] == 3, shown_redis.stderr
        assert orjson.loads(v2.stdout)["profile"]["systemPrompt"] == "two"
        out, read_only = await both(("current", "support", "1", *redis_way), ("delete", "default", *api_way))
        assert out.returncode == 0 and "current v1" in out.stdout, out.stdout + out.stderr
        assert read_only.returncode == 2 and "read-only" in read_only.stderr, read_only.stderr
        (out,) = await both(("ramp", "support", "3", "10", *api_way))
        assert out.returncode == 0 and "ramp v3 10 %" in out.stdout, out.stdout + out.stderr
        listed, gone = await both(("list", *redis_way), ("delete", "support", *api_way))
        assert "support  current v1  latest v3  ramp v3 10 %" in listed.stdout, listed.stdout
        assert gone.returncode == 0, gone.stderr
        with pytest.raises(ApiError) as info:
            await c.get_agent("support")
        assert info.value.status == 404
