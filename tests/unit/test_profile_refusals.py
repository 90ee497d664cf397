"""Profiles refused when loaded, in a line naming AGENTMILL_PROFILES and the profile; and the keys a
worker's profiles name, checked before it calls a provider without one."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from shared.preflight import missing_keys
from shared.profiles import BUILTIN_TOOLS, AgentProfile, load_profiles
from shared.provider_config import ProviderConfig
from shared.settings_errors import SettingsError
from worker.tools.builtin import BUILTINS


def test_the_tool_names_a_profile_may_list_are_the_workers_built_ins() -> None:
    assert set(BUILTINS) == BUILTIN_TOOLS


def load(tmp_path: Path, data: object) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(orjson.dumps(data))
    load_profiles(str(path), dev=True)


def test_a_file_that_is_missing_or_not_json_is_refused_in_a_line(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"^AGENTMILL_PROFILES=/nonexistent.json: cannot read it \("):
        load_profiles("/nonexistent.json")
    (tmp_path / "p.json").write_text("{profiles")
    with pytest.raises(SettingsError, match=r"p.json: not JSON \("):
        load_profiles(str(tmp_path / "p.json"))


def test_errors_are_told_under_the_profiles_name(tmp_path: Path) -> None:
    with pytest.raises(
        SettingsError, match=r"profile 'a': tools: no built-in tool named 'ech' \(did you mean 'echo'"
    ):
        load(tmp_path, {"profiles": [{"name": "a", "tools": ["ech"]}]})
    with pytest.raises(SettingsError, match=r"profile 'b': retry.maxRetries: Input should be less"):
        load(tmp_path, {"profiles": [{"name": "a"}, {"name": "b", "retry": {"maxRetries": 99}}]})
    with pytest.raises(SettingsError, match=r"profiles.0: name: Field required"):
        load(tmp_path, {"profiles": [{"tools": []}]})
    with pytest.raises(SettingsError, match=r"no built-in tool named 'zzz' \(built-in tools:"):
        load(tmp_path, {"profiles": [{"name": "a", "tools": ["zzz"]}]})


def test_a_key_is_missing_when_its_variable_is_unset_or_empty_or_its_file_unreadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def gpt(**key: str) -> dict[str, AgentProfile]:
        provider = ProviderConfig(kind="openai", base_url="http://x/v1", model="m", **key)  # type: ignore[arg-type]
        return {"gpt": AgentProfile(name="gpt", provider=provider)}

    monkeypatch.delenv("TEST_PROFILE_KEY", raising=False)
    assert "names TEST_PROFILE_KEY, which is not set" in (
        missing_keys(gpt(api_key_env="TEST_PROFILE_KEY")) or ""
    )
    monkeypatch.setenv("TEST_PROFILE_KEY", "")
    assert missing_keys(gpt(api_key_env="TEST_PROFILE_KEY")) is not None
    monkeypatch.setenv("TEST_PROFILE_KEY", "sk-1")
    assert missing_keys(gpt(api_key_env="TEST_PROFILE_KEY")) is None
    assert "cannot be read" in (missing_keys(gpt(api_key_file=str(tmp_path / "none"))) or "")
    (tmp_path / "key").write_text("sk-2")
    assert missing_keys(gpt(api_key_file=str(tmp_path / "key"))) is None
    assert missing_keys(load_profiles(None, dev=True)) is None  # no key named: none missing
    # every provider of a fallback chain is checked, by its place in the chain
    plain = ProviderConfig(kind="openai", base_url="http://x/v1", model="m")
    keyed = ProviderConfig(kind="openai", base_url="http://y/v1", model="m", api_key_env="TEST_FALLBACK_KEY")
    monkeypatch.delenv("TEST_FALLBACK_KEY", raising=False)
    chained = {"c": AgentProfile(name="c", providers=[plain, keyed])}
    assert "profile 'c': providers.1.apiKeyEnv names TEST_FALLBACK_KEY" in (missing_keys(chained) or "")
