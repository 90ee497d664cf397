"""shared.tenants: which settings name tenants, and when AGENTMILL_ID_SECRET is required."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.settings import Settings
from shared.settings_errors import SettingsError
from shared.tenants import named_tenants, parse_tokens, require_id_secret


def test_tokens_parse_to_their_tenants_and_a_bare_token_is_the_default_tenant() -> None:
    assert parse_tokens("a=t1, b=t2\n# note\nc") == {"a": "t1", "b": "t2", "c": "default"}


def test_tokens_and_quotas_name_tenants_but_the_default_one_and_auth_off_do_not(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("x=t3\n")
    assert named_tenants(Settings()) == {}
    assert named_tenants(Settings(api_tokens="a=default,b")) == {}
    assert named_tenants(Settings(api_tokens="a=t2,b=t1", api_tokens_file=str(path))) == {
        "AGENTMILL_API_TOKENS": ["t1", "t2", "t3"]
    }
    assert named_tenants(Settings(api_tokens="a=t1", auth_disabled=True)) == {}
    assert named_tenants(Settings(tenant_quotas='{"default": {"maxRunning": 2}}')) == {}
    assert named_tenants(Settings(tenant_quotas='{"t9": {"maxRunning": 2}}')) == {
        "AGENTMILL_TENANT_QUOTAS": ["t9"]
    }
    assert named_tenants(Settings(api_tokens_file=str(tmp_path / "missing"), tenant_quotas="[")) == {}


def test_the_secret_is_required_only_where_tenants_are_named() -> None:
    require_id_secret(Settings())
    require_id_secret(Settings(api_tokens="a=t1", id_secret="s"))
    with pytest.raises(SettingsError) as refused:
        require_id_secret(Settings(api_tokens=",".join(f"k{i}=t{i}" for i in range(5))))
    line = str(refused.value)
    assert "\n" not in line and line.startswith("AGENTMILL_ID_SECRET is not set")
    assert "AGENTMILL_API_TOKENS names tenants (t0, t1, t2 and 2 more)" in line
