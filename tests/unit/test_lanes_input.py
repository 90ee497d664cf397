"""RunInput.priority and runAt as a caller sends them, and the lane a prepared run gets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from agentmill_client.models import RunInput
from producer.prepared import prepare
from producer.scope import Scope
from producer.submitter import Submitter
from shared.profiles import AgentProfile
from shared.quotas import DEFAULT_TENANT, Quotas
from shared.scripts import Scripts
from shared.settings import Settings

MSG = [{"role": "user", "content": "hi"}]


def run(**kw: Any) -> RunInput:
    return RunInput.model_validate({"inputMessages": MSG, **kw})


@pytest.mark.parametrize(
    ("given", "ms"),
    [
        ("2026-01-31T09:00:00Z", 1769850000000),
        ("2026-01-31T10:00:00+01:00", 1769850000000),
        ("2026-01-31T09:00:00.250Z", 1769850000250),
        (1769850000000, 1769850000000),
        ("1769850000000", 1769850000000),
        (datetime(2026, 1, 31, 4, tzinfo=timezone(timedelta(hours=-5))), 1769850000000),
    ],
)
def test_run_at_is_epoch_ms_from_rfc_3339_or_ms(given: Any, ms: int) -> None:
    assert run(runAt=given).run_at == ms
    assert run(runAt=given).model_dump(by_alias=True, exclude_none=True)["runAt"] == ms


@pytest.mark.parametrize(
    "bad",
    ["tomorrow", "2026-01-31T09:00:00", datetime(2026, 1, 31), -1, 10**15, "2026-13-01T00:00:00Z"],
)
def test_a_run_at_without_a_clear_instant_is_refused_naming_the_field(bad: Any) -> None:
    with pytest.raises(ValidationError, match=r"runAt|run_at"):
        run(runAt=bad)


def test_priority_is_0_to_9_and_a_session_run_takes_no_run_at() -> None:
    assert run().priority is None and run(priority=0).priority == 0 and run(priority=9).priority == 9
    for bad in (-1, 10, "high"):
        with pytest.raises(ValidationError, match="priority"):
            run(priority=bad)
    with pytest.raises(ValidationError, match="runAt"):
        run(runAt=5, sessionId="s1")
    with pytest.raises(ValidationError, match="runAt"):
        run(runAt=5, autoCreateSession=True)


def test_a_prepared_runs_lane_is_its_priority_capped_by_the_tenants_quota() -> None:
    scope = Scope.of(Settings(), DEFAULT_TENANT)
    quotas = Quotas(Settings(tenant_quotas='{"t1": {"maxPriority": 3}}'))
    cap = quotas.of("t1").max_priority
    at = int(datetime(2030, 1, 1, tzinfo=UTC).timestamp() * 1000)

    def lane(*a: Any) -> tuple[str, str]:
        s = prepare(*a).submission(DEFAULT_TENANT)  # the run's record for the submit scripts
        return s.priority, s.run_at

    assert lane(run(), scope, lambda r: "r1") == ("5", "")
    assert lane(run(priority=8, runAt=at), scope, lambda r: "r1") == ("8", str(at))
    assert lane(run(priority=8), scope, lambda r: "r1", cap) == ("3", "")
    assert lane(run(), scope, lambda r: "r1", cap) == ("3", "")  # the default too
    assert lane(run(priority=1), scope, lambda r: "r1", cap) == ("1", "")
    assert quotas.of("other").max_priority == 9


def test_an_agent_profile_caps_the_priority_too() -> None:
    profiles = {"default": AgentProfile(name="default"), "bulk": AgentProfile(name="bulk", max_priority=2)}
    s = Submitter(None, Settings(), Scripts(_NoRedis()), profiles)  # type: ignore[arg-type]
    named = {"runId": "r1", "priority": 8}
    assert s.prepare(run(**named), DEFAULT_TENANT).priority == 8
    assert s.prepare(run(**named, agent="bulk"), DEFAULT_TENANT).priority == 2
    capped = Quotas(Settings(tenant_quotas='{"t1": {"maxPriority": 1}}')).of("t1")
    assert s.prepare(run(**named, agent="bulk"), "t1", quota=capped).priority == 1


class _NoRedis:
    """Enough of a client for Scripts to register on (the test sends nothing)."""

    def register_script(self, text: str) -> None:
        return None
