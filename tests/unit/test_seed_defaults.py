"""Defaults the design documents name, held by the code as they are: the model-call backoff capped
at 10 s (a server's Retry-After capped too), a tool's 1 s retry delay, a session's 10 loops within
7 days, and internal calls kept out of what a session keeps."""

from __future__ import annotations

import time
from typing import Any

from agentmill_client.models import Message, RunInput, RunResult, RunStatus, ToolCall, ToolResult
from shared.profiles import AgentProfile, ContextConfig, RetryConfig, ToolSettings
from shared.tool_records import ToolRecord
from worker.core import context, policy
from worker.core.config import resolve_config
from worker.core.sessions import session_update
from worker.machine import initial_state
from worker.tools.base import ToolContext
from worker.tools.registry import ProfileTools

DAY_MS = 24 * 3_600_000


def test_the_model_call_backoff_doubles_from_1_s_to_its_10_s_cap_and_caps_retry_after() -> None:
    cfg = RetryConfig()
    assert [policy.backoff_ms(n, cfg) for n in range(1, 7)] == [1_000, 2_000, 4_000, 8_000, 10_000, 10_000]
    for u in (0.0, 0.5, 0.999):  # jitter never takes a retry past the cap
        assert policy.backoff_ms(12, cfg, u) <= 10_000 and policy.backoff_ms(60, cfg, u) <= 10_000
    assert policy.backoff_ms(1, cfg, 0.5, retry_after_ms=3_000) == 3_000  # a longer Retry-After wins…
    assert policy.backoff_ms(1, cfg, 0.5, retry_after_ms=3_600_000) == 60_000  # …up to retryAfterCapMs
    assert policy.backoff_ms(5, cfg, 0.5, retry_after_ms=10) == 10_000  # a shorter one changes nothing


async def test_a_failed_tool_attempt_is_retried_after_1_s_by_default() -> None:
    assert ToolSettings().retry_delay_ms == 1_000 and ToolSettings().max_tries == 3
    tools = ProfileTools(AgentProfile(name="p", tools=["flaky"]))
    call = ToolCall(id="c1", name="flaky", arguments='{"failures": 1}')
    retried: list[Any] = []

    async def on_retry(r: Any) -> None:
        retried.append(r)

    t0 = time.monotonic()
    result = await tools.execute(call, ToolContext("r", None, "c1", "k", 1, {}, None), on_retry)
    took = time.monotonic() - t0
    assert result.content == "ok after 2 attempts" and len(retried) == 1
    assert 0.95 <= took < 3.0, took


def test_a_session_shows_its_newest_10_loops_within_7_days_by_default() -> None:
    run = RunInput.model_validate({"inputMessages": [{"role": "user", "content": "x"}], "sessionId": "s"})
    cfg = resolve_config(AgentProfile(name="p"), run, {}, has_session=True).context
    assert (cfg.max_run_loops, cfg.max_time_range_ms) == (10, 7 * DAY_MS) == (
        ContextConfig().max_run_loops, ContextConfig().max_time_range_ms)  # fmt: skip
    now = 100 * DAY_MS

    def loop(i: int, age_ms: int) -> context.RunLoop:
        return context.RunLoop(run_id=f"r{i}", started_at_ms=now - age_ms, ended_at_ms=now - age_ms,
                               user=Message(role="user", content=f"q{i}"),
                               assistant=Message(role="assistant", content=f"a{i}"))  # fmt: skip

    loops = [loop(0, 8 * DAY_MS), *(loop(i, 7 * DAY_MS - i) for i in range(1, 13))]
    shown = [m.text for m in context.reduce_history(loops, cfg, now) if m.role == "user"]
    assert shown == [f"q{i}" for i in range(3, 13)]  # the 8-day-old turn and the two oldest left out


def test_a_session_keeps_the_runs_own_tool_calls_never_its_internal_ones() -> None:
    calls = [ToolCall(id="c1.0", name="echo", arguments="{}"), ToolCall(id="c1.1", name="recall_tool_call"),
             ToolCall(id="c1.2", name="search_history"), ToolCall(id="c1.3", name="load_older_history")]  # fmt: skip
    transcript = [Message(role="user", content="go"), Message(role="assistant", tool_calls=calls),
                  *(Message(role="tool", content=f"r {c.name}", tool_call_id=c.id, name=c.name) for c in calls),
                  Message(role="assistant", content="done")]  # fmt: skip
    state = initial_state("run-1").model_copy(update={"session_id": "s", "transcript": transcript})
    result = RunResult(run_id="run-1", status=RunStatus.COMPLETED, final_assistant_message=transcript[-1])
    records = {c.id: ToolRecord.finished(1, 1, ToolResult(tool_call_id=c.id, name=c.name, content=f"r {c.name}"),
                                         called_at_ms=5) for c in calls}  # fmt: skip
    update = session_update(state, result, records, 5)
    assert update is not None and [i for i, _ in update.tool_results] == ["run-1/c1.0"]
    loop = context.RunLoop.model_validate_json(update.loop or b"")
    assert [c.name for c in loop.tool_calls] == ["echo"] and loop.tool_call_ids == ["run-1/c1.0"]
