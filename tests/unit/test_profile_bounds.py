"""A caller can only narrow what its profile allows; test-only profiles stay out of production."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agentmill_client import limits
from agentmill_client.models import LoopLimits, RunInput
from shared.profiles import AgentProfile, ToolSettings, load_profiles
from worker.core.config import DEFAULT_MAX_ITERATIONS, RunConfig, resolve_config

HOUR = 3_600_000


def config(run_limits: dict[str, Any] | None, profile_limits: dict[str, Any] | None) -> RunConfig:
    prof = AgentProfile(name="p", loop_limits=LoopLimits.model_validate(profile_limits or {}))
    body: dict[str, Any] = {"inputMessages": [{"role": "user", "content": "hi"}]}
    if run_limits is not None:
        body["loopLimits"] = run_limits
    return resolve_config(
        prof, RunInput.model_validate(body), {}, has_session=False,
        duration_default_ms=HOUR, duration_max_ms=24 * HOUR,
    )  # fmt: skip


def test_a_run_cannot_raise_its_profiles_limits() -> None:
    cfg = config(
        {"maxIterations": 1000, "maxToolRounds": 1000, "maxRunDurationMs": 7 * 24 * HOUR},
        {"maxIterations": 5, "maxToolRounds": 2, "maxRunDurationMs": 60_000},
    )
    assert (cfg.max_iterations, cfg.max_tool_rounds, cfg.max_run_duration_ms) == (5, 2, 60_000)


def test_a_run_can_narrow_its_profiles_limits() -> None:
    cfg = config(
        {"maxIterations": 3, "maxToolRounds": 1, "maxRunDurationMs": 1_000},
        {"maxIterations": 5, "maxToolRounds": 2, "maxRunDurationMs": 60_000},
    )
    assert (cfg.max_iterations, cfg.max_tool_rounds, cfg.max_run_duration_ms) == (3, 1, 1_000)


def test_unset_profile_limits_mean_the_defaults_and_the_deployments_maximum() -> None:
    cfg = config({"maxIterations": 1000, "maxRunDurationMs": 7 * 24 * HOUR}, None)
    assert cfg.max_iterations == DEFAULT_MAX_ITERATIONS
    assert cfg.max_run_duration_ms == 24 * HOUR  # capped by AGENTMILL_RUN_DURATION_MAX_MS
    assert config(None, None).max_run_duration_ms == HOUR  # AGENTMILL_RUN_DURATION_DEFAULT_MS
    assert config({"maxToolRounds": 4}, None).max_tool_rounds == 4  # the profile sets none: the run's


def test_a_run_asking_for_every_limits_maximum_gets_no_more_than_its_default_profile_allows() -> None:
    """The attack: a RunInput on a profile that sets no limits asks for the largest value of each
    loopLimits field; each is lowered to what the run gets without asking (the run's duration to the
    deployment's maximum, AGENTMILL_RUN_DURATION_MAX_MS, as documented)."""
    greedy = {
        n: max(m.le for m in f.metadata if hasattr(m, "le")) for n, f in LoopLimits.model_fields.items()
    }
    asked = config(LoopLimits(**greedy).model_dump(by_alias=True, exclude_none=True), None)
    plain = config(None, None)
    assert asked.max_depth == plain.max_depth == 3
    assert asked.max_iterations == plain.max_iterations and asked.max_tool_calls == plain.max_tool_calls
    assert asked.max_repairs == plain.max_repairs
    assert asked.max_run_duration_ms == 24 * HOUR
    assert asked.max_tool_rounds == 1_000  # unset means unlimited: any number narrows it
    assert set(greedy) == {
        "max_iterations", "max_tool_rounds", "max_run_duration_ms", "max_repairs", "max_tool_calls", "max_depth",
    }  # fmt: skip  # a new limit gets its line above


def test_a_runs_depth_above_its_profiles_is_lowered_to_it() -> None:
    assert config({"maxDepth": 10}, {"maxDepth": 2}).max_depth == 2
    assert config({"maxDepth": 1}, {"maxDepth": 2}).max_depth == 1
    assert config({"maxDepth": 10}, {"maxDepth": 6}).max_depth == 6  # a profile may allow more


def test_the_scripted_test_profile_is_loaded_only_in_dev_mode() -> None:
    assert "scripted" not in load_profiles(None, dev=False)
    assert "default" in load_profiles(None, dev=False)
    assert "scripted" in load_profiles(None, dev=True)


@pytest.mark.parametrize(
    "profile",
    [
        {"name": "s", "provider": {"kind": "scripted", "mode": "script"}},
        {"name": "s", "tools": ["calculator", "sleep"]},
        {"name": "s", "tools": ["echo"]},
    ],
)
def test_a_test_only_profile_in_a_file_is_refused_outside_dev_mode(
    tmp_path: Path, profile: dict[str, Any]
) -> None:
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps({"profiles": [profile]}))
    with pytest.raises(ValueError, match="AGENTMILL_DEV_PROFILES"):
        load_profiles(str(path), dev=False)
    assert "s" in load_profiles(str(path), dev=True)


def test_tool_timeouts_and_retry_delays_are_capped() -> None:
    with pytest.raises(ValidationError):
        ToolSettings(timeout_s=limits.MAX_TOOL_TIMEOUT_S + 1)
    with pytest.raises(ValidationError):
        ToolSettings(retry_delay_ms=limits.MAX_TOOL_RETRY_DELAY_MS + 1)


async def test_a_scripted_turns_delay_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from agentmill_client.models import Message
    from shared.provider_config import ProviderConfig
    from worker.machine import ModelRequest
    from worker.models.scripted import ScriptedProvider

    monkeypatch.setattr(limits, "MAX_SCRIPT_DELAY_MS", 50)
    req = ModelRequest("r1", None, [Message(role="user", content="x")], [], 0, 0, 0)
    provider = ScriptedProvider(ProviderConfig(kind="scripted", mode="script"))
    t0 = time.monotonic()
    chunks = [c async for c in provider.stream(req, {"script": [{"text": "hi", "delayMs": 10**9}]})]
    assert chunks and time.monotonic() - t0 < 2.0


def test_retry_reason_labels_are_a_fixed_set() -> None:
    from worker.telemetry.metrics import MetricsObserver, retry_reason_label

    assert retry_reason_label("http_503") == "http_503"
    assert retry_reason_label("timeout") == "timeout"
    assert retry_reason_label("http_599") == retry_reason_label("http_123456") == "http_other"
    m = MetricsObserver()
    for code in range(600, 700):
        m.model_retry(f"http_{code}")
    assert b'reason="http_other"} 100.0' in m.render()
    assert b"http_650" not in m.render()
