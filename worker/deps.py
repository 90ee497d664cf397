"""What every run on one worker process shares: Redis, scripts, profiles, tools, providers, HTTP."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx
import orjson
from redis.asyncio import Redis

from shared import keys, netguard
from shared.clock import now_ms
from shared.models import Message, RunResult, RunStatus, ToolCall, ToolResult
from shared.profiles import AgentProfile, ContextConfig
from shared.scripts import Scripts
from shared.settings import Settings
from worker import context
from worker.batcher import ScriptBatcher
from worker.config import RECALL_TOOL
from worker.lease import WorkerLease
from worker.limiter import ProviderLimiter
from worker.machine import RunState
from worker.models.base import ModelProvider
from worker.models.scripted import ScriptedProvider
from worker.observer import NullObserver, Observer
from worker.store import SessionUpdate
from worker.tools.registry import ProfileTools

if TYPE_CHECKING:
    from worker.runner import RunDriver


class UnknownProfileError(LookupError):
    pass


@dataclass
class WorkerDeps:
    redis: Redis
    settings: Settings
    profiles: dict[str, AgentProfile]
    http: httpx.AsyncClient
    worker_id: str
    observer: Observer = field(default_factory=NullObserver)
    guarded_http: httpx.AsyncClient = field(default_factory=netguard.guarded_client)  # HTTP tools
    lease: WorkerLease | None = None  # the worker's lease deadline; None = unguarded (unit tests)
    lease_id: str = ""  # the id this worker holds its lease and runs under ("" = worker_id)
    scripts: Scripts = field(init=False)
    batcher: ScriptBatcher = field(init=False)  # the runs' commits, pipelined per loop turn
    limiter: ProviderLimiter = field(init=False)
    active: dict[str, RunDriver] = field(default_factory=dict)
    _tools: dict[str, ProfileTools] = field(default_factory=dict)
    _providers: dict[str, ModelProvider] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lease_id = self.lease_id or self.worker_id
        self.batcher = ScriptBatcher(self.redis)
        self.scripts = Scripts(
            self.redis,
            queued_check_ms=self.settings.queued_check_ms,
            stream_maxlen=self.settings.stream_maxlen,
            retention_s=self.settings.retention_s,
        )
        self.limiter = ProviderLimiter(self.scripts, lease_ms=self.settings.provider_slot_lease_ms)

    def profile(self, name: str) -> AgentProfile:
        try:
            return self.profiles[name]
        except KeyError:
            raise UnknownProfileError(f"no profile named {name!r}") from None

    def tools_for(self, profile: AgentProfile) -> ProfileTools:
        t = self._tools.get(profile.name)
        if t is None:
            t = self._tools[profile.name] = ProfileTools(profile, self.guarded_http)
        return t

    def provider_for(self, profile: AgentProfile) -> ModelProvider:
        p = self._providers.get(profile.name)
        if p is None:
            if profile.provider.kind == "scripted":
                p = ScriptedProvider(profile.provider)
            else:
                from worker.models.openai import OpenAIProvider

                p = OpenAIProvider(profile.provider, self.http)
            self._providers[profile.name] = p
        return p

    async def load_history(self, session_id: str | None, cfg: ContextConfig) -> list[Message]:
        """The reduced past run loops of the session (seed 002)."""
        if session_id is None:
            return []
        key = keys.session_history_key(session_id)
        raw = await self.redis.lrange(key, -max(cfg.max_run_loops, 1), -1)  # type: ignore[misc]
        loops = [context.RunLoop.model_validate_json(r) for r in raw]
        return context.reduce_history(loops, cfg, now_ms())

    async def recall(self, session_id: str | None, call: ToolCall, run_id: str | None = None) -> ToolResult:
        """The internal recall_tool_call tool: a tool result by its id, from this run's own calls
        (compacted away or not) or else from the session's past runs."""
        try:
            wanted = str(orjson.loads(call.arguments or "{}").get("callId", ""))
        except (orjson.JSONDecodeError, AttributeError):
            wanted = ""
        raw = None
        if run_id is not None and wanted:
            rec = await self.redis.hget(keys.tools_key(run_id), wanted)  # type: ignore[misc]
            if rec is not None:
                record = orjson.loads(rec)
                if record.get("state") == "done" and isinstance(record.get("result"), dict):
                    raw = orjson.dumps(record["result"])
        if raw is None and session_id is not None and wanted:
            raw = await self.redis.hget(keys.session_tool_results_key(session_id), wanted)  # type: ignore[misc]
        if raw is None:
            content = orjson.dumps({"error": "tool call result not found", "callId": wanted}).decode()
            return ToolResult(tool_call_id=call.id, name=call.name, content=content, is_error=True)
        past = ToolResult.model_validate_json(raw)
        return ToolResult(tool_call_id=call.id, name=call.name, content=past.content, is_error=past.is_error)

    def session_update(self, state: RunState, result: RunResult) -> SessionUpdate | None:
        """A completed run becomes a run loop of its session; aborted and failed runs leave no trace (seed 001)."""
        if state.session_id is None:
            return None
        if result.status != RunStatus.COMPLETED:
            return SessionUpdate(state.session_id)
        user = next((m for m in state.transcript if m.role == "user"), None)
        if user is None:
            return SessionUpdate(state.session_id)
        tool_results = [
            (m.tool_call_id, ToolResult(tool_call_id=m.tool_call_id, name=m.name or "", content=m.content))
            for m in state.transcript
            if m.role == "tool" and m.tool_call_id and m.name != RECALL_TOOL
        ]
        loop = context.RunLoop(
            run_id=state.run_id,
            started_at_ms=state.started_at_ms,
            ended_at_ms=now_ms(),
            user=user,
            assistant=result.final_assistant_message,
            tool_call_ids=[i for i, _ in tool_results],
            tool_calls=[context.PastCall(id=i, name=r.name) for i, r in tool_results],
        )
        return SessionUpdate(
            state.session_id,
            loop.model_dump_json(by_alias=True).encode(),
            [(i, r.model_dump_json(by_alias=True).encode()) for i, r in tool_results],
        )

    async def aclose(self) -> None:
        await self.batcher.aclose()
        for p in self._providers.values():
            await p.aclose()
        await self.guarded_http.aclose()
