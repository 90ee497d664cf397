"""The Python client's and the CLI's agent calls (``agentmill agents …``), through the API and
straight to Redis: both see and change the same versions of a tenant's agent."""

from __future__ import annotations

import asyncio
import json
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


async def test_the_client_and_the_cli_cover_the_agent_calls(redis_url: str, tmp_path: Path) -> None:
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

        path = tmp_path / "p.json"
        path.write_text(json.dumps(profile("three")))
        ways = [("--api", url, "--token", "tok-a"), ("--tenant", "tenant-a")]
        made = await asyncio.to_thread(cli, redis_url, "agents", "create", str(path), "--json", *ways[0])
        assert made.returncode == 0, made.stderr
        assert orjson.loads(made.stdout)["version"] == 3
        for way in ways:
            out = await asyncio.to_thread(cli, redis_url, "agents", "show", "support", "--json", *way)
            assert out.returncode == 0, out.stderr
            assert orjson.loads(out.stdout)["currentVersion"] == 3
        out = await asyncio.to_thread(cli, redis_url, "agents", "current", "support", "1", *ways[1])
        assert out.returncode == 0 and "current v1" in out.stdout, out.stdout + out.stderr
        out = await asyncio.to_thread(cli, redis_url, "agents", "ramp", "support", "3", "10", *ways[0])
        assert out.returncode == 0 and "ramp v3 10 %" in out.stdout, out.stdout + out.stderr
        out = await asyncio.to_thread(
            cli, redis_url, "agents", "show", "support", "--version", "2", "--json", *ways[1]
        )
        assert orjson.loads(out.stdout)["profile"]["systemPrompt"] == "two"
        out = await asyncio.to_thread(cli, redis_url, "agents", "list", *ways[1])
        assert "support  current v1  latest v3  ramp v3 10 %" in out.stdout, out.stdout
        out = await asyncio.to_thread(cli, redis_url, "agents", "delete", "default", *ways[0])
        assert out.returncode == 2 and "read-only" in out.stderr, out.stderr
        out = await asyncio.to_thread(cli, redis_url, "agents", "delete", "support", *ways[1])
        assert out.returncode == 0, out.stderr
        with pytest.raises(ApiError) as info:
            await c.get_agent("support")
        assert info.value.status == 404
