"""What a tenant may put in an agent (shared/agent_rules.py): each refusal names the field; the
provider is an operator connection with the tenant's choices over it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from shared.agent_rules import AgentRefusal, build, checked, parse_ref
from shared.connections import load_connections
from shared.profiles import BUILTIN_PROFILES
from shared.provider_config import ProviderConfig
from shared.settings_errors import SettingsError

CONNECTIONS = {
    **load_connections(None, dev=True),
    "main": ProviderConfig(kind="openai", base_url="https://llm.internal/v1", api_key_env="KEY",
                           model="m-1", max_concurrent=4),
}  # fmt: skip
OPERATOR = {p.name: p for p in BUILTIN_PROFILES}


def check(body: dict[str, Any], *, dev: bool = True, max_priority: int = 9) -> Any:
    return checked(body, CONNECTIONS, OPERATOR, max_priority=max_priority, duration_max_ms=3_600_000, dev=dev)


def refused(body: dict[str, Any], **kw: Any) -> str:
    with pytest.raises(AgentRefusal) as info:
        check(body, **kw)
    return info.value.field


def agent(**kw: Any) -> dict[str, Any]:
    return {"name": "support", "provider": {"connection": "main", "model": "m-2"}, **kw}


def test_the_provider_is_the_connection_with_the_tenants_choices() -> None:
    p = check(agent(systemPrompt="hi", provider={"connection": "main", "model": "m-2", "temperature": 0.1}))
    assert (p.provider.base_url, p.provider.api_key_env, p.provider.max_concurrent) == (
        "https://llm.internal/v1",
        "KEY",
        4,
    )
    assert (p.provider.model, p.provider.temperature, p.system_prompt) == ("m-2", 0.1, "hi")
    assert build(agent(), CONNECTIONS).provider.model == "m-2"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (agent(provider={"connection": "main", "baseUrl": "https://mine.example.com"}), "provider.baseUrl"),
        (agent(provider={"connection": "main", "api_key_env": "HOME"}), "provider.apiKeyEnv"),
        (agent(provider={"connection": "main", "maxConcurrent": 100}), "provider.maxConcurrent"),
        (agent(provider={"kind": "openai"}), "provider.kind"),
        (agent(provider={"connection": "nope"}), "provider.connection"),
        (agent(provider="main"), "provider"),
        (agent(name="a@b"), "name"),
        (agent(name="default"), "name"),
        (agent(httpTools=[{"name": "t", "url": "http://10.0.0.1/x"}]), "httpTools.0.url"),
        (agent(httpTools=[{"name": "t", "url": "file:///etc/passwd"}]), "httpTools.0.url"),
        (
            agent(httpTools=[{"name": "t", "url": "https://a.example.com", "allowHosts": ["x"]}]),
            "httpTools.0.allowHosts",
        ),
        (
            agent(
                httpTools=[{"name": "t", "url": "https://a.example.com", "headers": {"X": "Bearer ${env:K}"}}]
            ),
            "httpTools.0.headers.X",
        ),
        (agent(mcpServers=[{"name": "m", "url": "http://localhost:1/mcp"}]), "mcpServers.0.url"),
        (agent(agentTools=[{"agent": "other-tenant-agent"}]), "agentTools.0.agent"),
        (agent(maxPriority=9), "maxPriority"),
        (agent(loopLimits={"maxRunDurationMs": 10**9}), "loopLimits.maxRunDurationMs"),
        (agent(tools=["nope"]), "tools"),
        (agent(systemPrompt=5), "systemPrompt"),
    ],
)
def test_a_rule_broken_is_refused_naming_the_field(body: dict[str, Any], field: str) -> None:
    assert refused(body, max_priority=5) == field


def test_test_tools_and_the_scripted_model_need_dev_profiles() -> None:
    assert refused(agent(tools=["sleep"]), dev=False) == "tools"
    assert "scripted" not in load_connections(None, dev=False)


def test_malformed_lists_are_refused_not_crashed_on() -> None:
    assert refused(agent(httpTools="x")) == "httpTools"
    assert (
        refused(agent(httpTools=[{"name": "t", "url": "https://a.example.com", "headers": "x"}]))
        == "httpTools.0.headers"
    )


def test_a_ref_names_a_version_with_at() -> None:
    assert parse_ref("support@7") == ("support", 7)
    assert parse_ref("support") == ("support", None)
    assert parse_ref("a@b") == ("a@b", None)
    assert parse_ref("@7") == ("@7", None)


def test_a_connections_file_the_schema_refuses_is_named_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "providers.json"
    for text, said in (
        ('{"providers": {"x": {"kind": "openai"}}}', "connection 'x': an openai connection needs baseUrl"),
        ('{"providers": {"x": {"kind": "nope"}}}', "providers.x.kind"),
        ("not json", "not JSON"),
        ('{"providers": {"t": {"kind": "scripted", "mode": "script"}}}', "for tests only"),
    ):
        bad.write_text(text)
        with pytest.raises(SettingsError, match=f"AGENTMILL_PROVIDERS={bad}: .*{re.escape(said)}"):
            load_connections(str(bad), dev=False)
    bad.write_text('{"providers": {"calculator": {"kind": "openai", "baseUrl": "http://llm:8080/v1"}}}')
    assert load_connections(str(bad), dev=False)["calculator"].kind == "openai"  # replaces the built-in
