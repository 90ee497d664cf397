"""SessionStore in memory (worker/adapters/memory_store.py's ``MemorySessionStore``): a session's
run loops, calls and past tool results, as the session keys hold them in Redis."""

from __future__ import annotations

from agentmill_client import limits
from agentmill_client.models import Message, ToolCall, ToolResult
from shared.profiles import ContextConfig
from shared.tool_records import ToolRecord
from worker.adapters.memory_run import MemoryRun
from worker.adapters.plain import SystemClock
from worker.core import context, sessions
from worker.core.commit_step import SessionUpdate
from worker.ports import Clock

__all__ = ["MemorySessionStore"]


class MemorySessionStore:
    """SessionStore in memory: run loops and past tool results per session; ``runs`` for recall
    of a run's own calls."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self.history: dict[str, list[bytes]] = {}
        self.results: dict[str, dict[str, bytes]] = {}
        self.calls: dict[str, list[bytes]] = {}
        self.runs: dict[str, MemoryRun] = {}

    def apply(self, u: SessionUpdate) -> None:
        if u.loop:
            self.history.setdefault(u.session_id, []).append(u.loop)
        self.results.setdefault(u.session_id, {}).update(dict(u.tool_results))
        calls = self.calls.setdefault(u.session_id, [])
        calls.extend(u.calls)
        del calls[: -limits.SESSION_CALLS_KEPT]

    async def load_history(self, session_id: str | None, cfg: ContextConfig) -> list[Message]:
        if session_id is None:
            return []
        raw = self.history.get(session_id, [])[-max(cfg.max_run_loops, 1) :]
        loops = [context.RunLoop.model_validate_json(r) for r in raw]
        return context.reduce_history(loops, cfg, self.clock.now_ms())

    async def recall(self, session_id: str | None, call: ToolCall, run_id: str | None = None) -> ToolResult:
        found = [(w, self._past(session_id, run_id, w)) for w in sessions.recall_ids(call)]
        return sessions.recall_answer(call, found)

    def _past(self, session_id: str | None, run_id: str | None, wanted: str) -> ToolResult | None:
        past = None
        run = self.runs.get(run_id or "")
        if run is not None and wanted in run.tools:
            past = ToolRecord.from_dict(run.tools[wanted]).recorded
        if past is None and session_id is not None and wanted:
            past = sessions.past_result(self.results.get(session_id, {}).get(wanted))
        return past

    async def load_past(
        self, session_id: str | None, max_loops: int
    ) -> tuple[list[context.RunLoop], list[context.PastCall], dict[str, ToolResult]]:
        if session_id is None or max_loops <= 0:
            return [], [], {}
        loops = [
            context.RunLoop.model_validate_json(r) for r in self.history.get(session_id, [])[-max_loops:]
        ]
        raw_calls = self.calls.get(session_id, [])[-sessions.MAX_SEARCHED_CALLS :]
        calls = [context.PastCall.model_validate_json(r) for r in raw_calls]
        stored = self.results.get(session_id, {})
        ids = [*(c.id for lp in loops for c in context.past_calls(lp)), *(c.id for c in calls)]
        return loops, calls, {i: r for i in ids if (r := sessions.past_result(stored.get(i))) is not None}
