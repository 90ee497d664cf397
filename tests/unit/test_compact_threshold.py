"""RunInput.compactThreshold: a run may lower its profile's compaction.maxMessages, never raise it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentmill_client.models import RunInput
from shared.profiles import AgentProfile, CompactionConfig
from tests.unit.test_preamble import drive, echo
from worker.core.config import resolve_config
from worker.core.config_cache import shareable


def run(**kw: object) -> RunInput:
    return RunInput.model_validate({"inputMessages": [{"role": "user", "content": "x"}], **kw})


def test_the_threshold_only_narrows_the_profiles_and_keeps_the_run_from_a_shared_config() -> None:
    profile = AgentProfile(name="p", compaction=CompactionConfig(max_messages=40))
    assert (
        resolve_config(profile, run(compactThreshold=10), {}, has_session=False).compaction.max_messages == 10
    )
    assert (
        resolve_config(profile, run(compactThreshold=400), {}, has_session=False).compaction.max_messages
        == 40
    )
    assert resolve_config(profile, run(), {}, has_session=False).compaction.max_messages == 40
    assert profile.compaction.max_messages == 40  # the profile's own is untouched
    assert not shareable(run(compactThreshold=10), profile.system_prompt) and shareable(run(), "x")


@pytest.mark.parametrize("value", [3, 100_001, "ten", -1])
def test_a_threshold_out_of_bounds_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(ValidationError, match="compactThreshold"):
        run(compactThreshold=value)


async def test_a_run_with_a_lower_threshold_compacts_where_its_profile_would_not() -> None:
    profile = AgentProfile(name="p", tools=["echo"])  # maxMessages 60
    script = [echo(f"step {i}") for i in range(4)] + [{"text": "done"}]
    plain, _ = await drive(profile, script)
    narrowed, _ = await drive(profile, script, compactThreshold=5)
    assert plain.payloads("compaction") == [] and narrowed.payloads("compaction")
