"""Figure 9's attacks (bench/attack_kinds.py) before the bench spends minutes on them: their profiles
load as the worker loads them, their run bodies are runs the API takes (or, the doubling schema,
refuses by its bound), and the figure's arguments select them. Nothing here starts a process."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from agentmill_client.models import RunInput
from bench.attack_kinds import ATTACKS, DOUBLING_RUN, FAN, REDOS_RUN, profiles
from bench.mcp_flood import flood_server
from shared.profiles import load_profiles
from shared.schema_bounds import SchemaBoundError, check_bounds


def test_the_attack_profiles_load_with_their_sub_agents_and_mcp_server(tmp_path: Path) -> None:
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps(profiles("http://127.0.0.1:1/mcp")))
    loaded = load_profiles(str(path), dev=True)
    assert [t.agent for t in loaded["fan0"].agent_tools] == ["fan1"]
    assert [t.agent for t in loaded["fan1"].agent_tools] == ["fan2"]
    assert len(loaded["fan0"].provider.script[0]["toolCalls"]) == FAN  # type: ignore[index]
    (server,) = loaded["flood"].mcp_servers
    assert server.tools_ttl_s == 0 and server.allow_hosts == ["127.0.0.1"]


def test_the_schema_attack_sends_a_backtracking_pattern_and_a_doubling_schema() -> None:
    run = RunInput.model_validate(REDOS_RUN)
    assert run.response_format is not None
    assert run.response_format.json_schema is not None
    check_bounds(run.response_format.json_schema.schema_)  # the pattern passes the bounds: the worker runs it
    doubled = RunInput.model_validate(DOUBLING_RUN).response_format
    assert doubled is not None
    assert doubled.json_schema is not None
    with pytest.raises(SchemaBoundError, match="branches"):
        check_bounds(doubled.json_schema.schema_)


async def test_the_flood_server_lists_every_tool() -> None:
    srv = flood_server(tools=20, description_chars=100, answer_chars=10)
    listed = await srv.list_tools()
    assert len(listed) == 21 and {t.name for t in listed} >= {"big", "filler19"}


def test_every_attack_is_measured_by_default() -> None:
    from bench.__main__ import parser

    args = parser().parse_args(["--only", "isolation"])
    assert args.isolation_attacks == list(ATTACKS) and args.isolation_attack_s <= 20
