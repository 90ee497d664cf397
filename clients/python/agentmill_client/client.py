"""Python clients of the HTTP API: ``AsyncClient`` and ``Client`` (httpx), typed with the shared models.

Batches: ``submit_batch``, ``create_batch``, ``get_batch``, ``wait_batch``, ``batch_runs``,
``batch_results``, ``abort_batch``, ``retry_batch`` (agentmill_client._batches).
Schedules: ``create_schedule``, ``get_schedule``, ``list_schedules``, ``pause_schedule``,
``resume_schedule``, ``delete_schedule`` (agentmill_client._schedules).
Deletion: ``delete_run``, ``delete_session``, ``create_deletion``, ``get_deletion``
(agentmill_client._deletions).
Agents: ``create_agent``, ``list_agents``, ``get_agent``, ``get_agent_version``,
``set_current_agent_version``, ``ramp_agent``, ``delete_agent`` (agentmill_client._agents).

``submit``, ``submit_batch`` and ``create_batch`` send the caller's current OpenTelemetry context
(``traceparent``) when opentelemetry-api is installed: the runs continue the caller's trace.

``events(run_id, after=…)`` yields every event once, in order, and reconnects from the last seq it
yielded when the connection drops or the API restarts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from typing import Any

import httpx

from agentmill_client import _wire as wire
from agentmill_client._agents import AgentCalls, AsyncAgentCalls
from agentmill_client._batches import AsyncBatchCalls, BatchCalls
from agentmill_client._deletions import AsyncDeletionCalls, DeletionCalls
from agentmill_client._governance import AsyncGovernanceCalls, GovernanceCalls
from agentmill_client._schedules import AsyncScheduleCalls, ScheduleCalls
from agentmill_client.api import (
    AbortAnswer,
    Accepted,
    ApprovalsAnswer,
    RunsPage,
    RunSummary,
    RunView,
    ToolResultsAnswer,
)
from agentmill_client.codec import to_jsonable
from agentmill_client.errors import ApiError
from agentmill_client.inputs import ClientToolResult, RunInput
from agentmill_client.outputs import RunEvent
from agentmill_client.statuses import TERMINAL
from agentmill_client.usage import UsageAnswer

__all__ = ["ApiError", "AsyncClient", "Client"]  # ApiError: what every call raises on an error answer


class AsyncClient(
    AsyncBatchCalls, AsyncScheduleCalls, AsyncGovernanceCalls, AsyncDeletionCalls, AsyncAgentCalls
):
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=wire.headers(token), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def submit(self, run: RunInput | dict[str, Any], *, idempotency_key: str | None = None) -> Accepted:
        headers = wire.trace_headers({"Idempotency-Key": idempotency_key} if idempotency_key else {})
        return Accepted.model_validate(
            wire.check(await self.http.post("/v1/runs", json=wire.body(run), headers=headers))
        )

    async def list_runs(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        session_id: str | None = None,
        batch_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_after: int | None = None,
        created_before: int | None = None,
        limit: int = 50,
        cursor: str | None = None,
        parent_run_id: str | None = None,
    ) -> RunsPage:
        """One page of the tenant's runs, newest first; pass ``page.next`` as ``cursor`` for the next.
        ``parent_run_id``: only the child runs (sub-agents) of that run."""
        params = wire.listing_params(
            status, agent, session_id, batch_id, metadata, created_after, created_before, parent_run_id
        )
        params += [("limit", str(limit))] + ([("cursor", cursor)] if cursor else [])
        return RunsPage.model_validate(wire.check(await self.http.get("/v1/runs", params=params)))

    async def iter_runs(self, **filters: Any) -> AsyncGenerator[RunSummary, None]:
        """Every run matching list_runs' filters, newest first, following the cursor."""
        cursor = None
        while True:
            page = await self.list_runs(**filters, cursor=cursor)
            for run in page.runs:
                yield run
            if page.next is None:
                return
            cursor = page.next

    async def usage(self, *, start: str | None = None, end: str | None = None) -> UsageAnswer:
        """The tenant's usage by UTC day and agent, ``start`` to ``end`` (YYYY-MM-DD, at most 92 days;
        default: the 30 days to today)."""
        params = {k: v for k, v in (("from", start), ("to", end)) if v}
        return UsageAnswer.model_validate(wire.check(await self.http.get("/v1/usage", params=params)))

    async def get(self, run_id: str) -> RunView:
        return RunView.model_validate(wire.check(await self.http.get(f"/v1/runs/{run_id}")))

    async def wait(self, run_id: str, *, timeout: float = 60.0) -> RunView:  # noqa: ASYNC109 - server-side long poll
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, min(55.0, deadline - time.monotonic()))
            view = RunView.model_validate(
                wire.check(
                    await self.http.get(
                        f"/v1/runs/{run_id}/wait", params={"timeout": left}, timeout=left + 10
                    )
                )
            )
            if view.status in TERMINAL or time.monotonic() >= deadline:
                return view

    async def events(
        self, run_id: str, *, after: int = 0, retry_s: float = 0.5, give_up_s: float = 60.0
    ) -> AsyncGenerator[RunEvent, None]:
        """Every event after ``after``, once, in order; ends after the terminal event."""
        last = after
        down_since: float | None = None
        while True:
            try:
                async with self.http.stream(
                    "GET",
                    f"/v1/runs/{run_id}/events",
                    params={"after": last},
                    timeout=httpx.Timeout(30.0, read=None),
                ) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        wire.check(resp)
                    down_since = None
                    async for event in wire.parse_sse(resp):
                        if event.seq <= last:
                            continue
                        last = event.seq
                        yield event
                        if event.terminal:
                            return
                # The stream ended without a terminal event (server restarting): reconnect.
            except (httpx.TransportError, httpx.RemoteProtocolError):
                pass
            if down_since is None:
                down_since = time.monotonic()
            elif time.monotonic() - down_since > give_up_s:
                raise ApiError(503, "unreachable", f"the API was unreachable for {give_up_s:.0f} s")
            await asyncio.sleep(retry_s)

    async def abort(self, run_id: str) -> AbortAnswer:
        return AbortAnswer.model_validate(wire.check(await self.http.post(f"/v1/runs/{run_id}/abort")))

    async def retry(self, run_id: str, *, from_start: bool = False) -> Accepted:
        """A failed or aborted run again: from its last checkpoint (its recorded tool results reused)
        or, ``from_start``, from its input. The new run's view names it as ``retryOf``."""
        body = {"from": "start" if from_start else "checkpoint"}
        return Accepted.model_validate(
            wire.check(await self.http.post(f"/v1/runs/{run_id}/retry", json=body))
        )

    async def fork(self, run_id: str, at_seq: int, input_messages: Sequence[Any] | None = None) -> Accepted:
        """A new run from the state at event ``at_seq`` of a run that ended, ``input_messages`` appended."""
        body: dict[str, Any] = {"atSeq": at_seq}
        if input_messages:
            body["inputMessages"] = [to_jsonable(m) for m in input_messages]
        return Accepted.model_validate(wire.check(await self.http.post(f"/v1/runs/{run_id}/fork", json=body)))

    async def approve(self, run_id: str, tool_call_id: str, *, reason: str | None = None) -> ApprovalsAnswer:
        return await self._decide(run_id, tool_call_id, True, reason)

    async def reject(self, run_id: str, tool_call_id: str, *, reason: str | None = None) -> ApprovalsAnswer:
        return await self._decide(run_id, tool_call_id, False, reason)

    async def tool_results(self, run_id: str, results: Sequence[ClientToolResult]) -> ToolResultsAnswer:
        """Results of client tool calls, all or none; posting the same result again is a no-op."""
        body = {"results": [to_jsonable(r) for r in results]}
        return ToolResultsAnswer.model_validate(
            wire.check(await self.http.post(f"/v1/runs/{run_id}/tool-results", json=body))
        )

    async def tool_result(
        self, run_id: str, tool_call_id: str, content: str, *, is_error: bool = False
    ) -> ToolResultsAnswer:
        return await self.tool_results(
            run_id, [ClientToolResult(tool_call_id=tool_call_id, content=content, is_error=is_error)]
        )

    async def _decide(
        self, run_id: str, tool_call_id: str, approved: bool, reason: str | None
    ) -> ApprovalsAnswer:
        d: dict[str, Any] = {"toolCallId": tool_call_id, "approved": approved}
        if reason:
            d["reason"] = reason
        answer = wire.check(await self.http.post(f"/v1/runs/{run_id}/approvals", json={"decisions": [d]}))
        return ApprovalsAnswer.model_validate(answer)


class Client(BatchCalls, ScheduleCalls, GovernanceCalls, DeletionCalls, AgentCalls):
    """The blocking client: the same calls as AsyncClient, run on a private event loop."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        self._loop = asyncio.new_event_loop()
        self._async: AsyncClient = AsyncClient(base_url, token=token, timeout=timeout)

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        self._run(self._async.aclose())
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, run: RunInput | dict[str, Any], *, idempotency_key: str | None = None) -> Accepted:
        return self._run(self._async.submit(run, idempotency_key=idempotency_key))  # type: ignore[no-any-return]

    def list_runs(self, **filters: Any) -> RunsPage:
        return self._run(self._async.list_runs(**filters))  # type: ignore[no-any-return]

    def iter_runs(self, **filters: Any) -> Iterator[RunSummary]:
        cursor = None
        while True:
            page = self.list_runs(**filters, cursor=cursor)
            yield from page.runs
            if page.next is None:
                return
            cursor = page.next

    def usage(self, *, start: str | None = None, end: str | None = None) -> UsageAnswer:
        return self._run(self._async.usage(start=start, end=end))  # type: ignore[no-any-return]

    def _iterate(self, agen: AsyncGenerator[Any, None]) -> Iterator[Any]:
        """An async generator of the async client, driven on this client's loop."""
        try:
            while True:
                try:
                    yield self._run(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._run(agen.aclose())

    def get(self, run_id: str) -> RunView:
        return self._run(self._async.get(run_id))  # type: ignore[no-any-return]

    def wait(self, run_id: str, *, timeout: float = 60.0) -> RunView:
        return self._run(self._async.wait(run_id, timeout=timeout))  # type: ignore[no-any-return]

    def events(self, run_id: str, *, after: int = 0) -> Iterator[RunEvent]:
        return self._iterate(self._async.events(run_id, after=after))

    def abort(self, run_id: str) -> AbortAnswer:
        return self._run(self._async.abort(run_id))  # type: ignore[no-any-return]

    def retry(self, run_id: str, *, from_start: bool = False) -> Accepted:
        return self._run(self._async.retry(run_id, from_start=from_start))  # type: ignore[no-any-return]

    def fork(self, run_id: str, at_seq: int, input_messages: Sequence[Any] | None = None) -> Accepted:
        return self._run(self._async.fork(run_id, at_seq, input_messages))  # type: ignore[no-any-return]

    def approve(self, run_id: str, tool_call_id: str, *, reason: str | None = None) -> ApprovalsAnswer:
        return self._run(self._async.approve(run_id, tool_call_id, reason=reason))  # type: ignore[no-any-return]

    def reject(self, run_id: str, tool_call_id: str, *, reason: str | None = None) -> ApprovalsAnswer:
        return self._run(self._async.reject(run_id, tool_call_id, reason=reason))  # type: ignore[no-any-return]

    def tool_results(self, run_id: str, results: Sequence[ClientToolResult]) -> ToolResultsAnswer:
        return self._run(self._async.tool_results(run_id, results))  # type: ignore[no-any-return]

    def tool_result(
        self, run_id: str, tool_call_id: str, content: str, *, is_error: bool = False
    ) -> ToolResultsAnswer:
        return self._run(self._async.tool_result(run_id, tool_call_id, content, is_error=is_error))  # type: ignore[no-any-return]
