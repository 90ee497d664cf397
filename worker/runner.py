"""The effect runner: ask the machine what to do, do it, commit, feed the outcome back.

One ``RunDriver`` drives one run for one job. Each transition's events, the checkpoint, tool
claims and tool results go to Redis in one fenced commit before any effect it asked for starts,
so a crash at any point resumes from the last commit: a checkpointed model reply is never asked
for again, a recorded tool result is never executed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError
from redis.exceptions import RedisError

from shared import logs
from shared.clock import now_ms
from shared.codec import encode, to_jsonable
from shared.models import (
    EventKind,
    Message,
    RunError,
    RunInput,
    RunResult,
    RunStatus,
    ToolCall,
    ToolResult,
    Usage,
)
from worker import context, failpoints, machine, policy
from worker.config import RECALL_TOOL, resolve_config
from worker.lease import LeaseExpiredError
from worker.limiter import Held, limited
from worker.machine import (
    AbortRequested,
    ApprovalsDecided,
    AwaitClient,
    AwaitHuman,
    CallModel,
    ClientResultsReceived,
    Compact,
    CompactionDone,
    ContextLoaded,
    DeadlineReached,
    Emit,
    Event,
    ExecuteTool,
    Finish,
    LoadContext,
    ModelFailed,
    ModelReplied,
    ModelRequest,
    ModelStreamOpened,
    OfferClientCalls,
    Resumed,
    RetryTimerFired,
    RunState,
    Started,
    ToolFinished,
    Wait,
)
from worker.models.base import ModelCallError, ReasoningDelta, StreamEnd, TextDelta, ToolCallDelta
from worker.policy import ModelFailure
from worker.store import (
    Acquired,
    FencedError,
    NotAcquired,
    Outbox,
    RunStore,
    SeqConflictError,
    SessionUpdate,
)
from worker.tools.base import ToolContext
from worker.tools.registry import ToolRetry

if TYPE_CHECKING:
    from worker.deps import WorkerDeps

log = logging.getLogger("agentmill.runner")


SUMMARY_PROMPT = (
    "Summarise the conversation below for your own later use: keep the user's goal, decisions, facts, "
    "numbers and tool results that still matter; drop chatter. Plain text, at most 300 words."
)


def _stamped(events: list[tuple[str, int, bytes]]) -> list[tuple[str, int, bytes]]:
    """An event's ts is when it is published (coalesced deltas were buffered earlier)."""
    ts = now_ms()
    return [(kind, ts, payload) for kind, _, payload in events]


class _Wake:
    """Put in the inbox to make the loop look at its flags (drain, fence)."""


class _Crashed(_Wake):
    """An effect raised something it should not have: the run fails with it as lastError."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class RunDriver:
    def __init__(self, deps: WorkerDeps, run_id: str, gen: int, job_try: int = 1) -> None:
        self.deps = deps
        self.run_id = run_id
        self.gen = gen
        self.job_try = job_try
        self.store = RunStore(deps.redis, deps.scripts, deps.settings, run_id, deps.lease, deps.batcher)
        self.inbox: asyncio.Queue[Event | _Wake] = asyncio.Queue()
        self.pending: deque[Event] = deque()
        self.tasks: set[asyncio.Task[None]] = set()  # running effects; a drain waits for them
        self.deadline: asyncio.TimerHandle | None = None  # not an effect: a drain does not wait for it
        self.lock = asyncio.Lock()  # one commit at a time: deltas from the model task, steps from the loop
        self.state = machine.initial_state(run_id)
        self.hints: dict[str, Any] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self.done_records: dict[str, bytes] = {}
        self.deltas: list[tuple[str, int, bytes]] = []
        self.delta_seq = 0
        self.last_flush = 0.0
        self.delta_published = False
        self.ckpt_seq = 0
        self.started_mono = time.monotonic()
        self.draining = False
        self.fenced = False
        self.abort_reason: str | None = None
        self.observed_start = False
        self.session_loops: list[context.RunLoop] = []

    # ---- signals from the worker (lease keeper, shutdown) ----

    def request_abort(self, reason: str) -> None:
        if self.abort_reason is None and not self.state.terminal:
            self.abort_reason = reason or "aborted by request"
            self._cancel_effects()
            self.inbox.put_nowait(AbortRequested(now_ms(), self.abort_reason))

    def fence(self) -> None:
        self.fenced = True
        self._cancel_effects()
        self.inbox.put_nowait(_Wake())

    def drain(self) -> None:
        self.draining = True
        self.inbox.put_nowait(_Wake())

    def cancel_effects_for_shutdown(self) -> None:
        self._cancel_effects()
        self.inbox.put_nowait(_Wake())

    # ---- the job ----

    async def run(self) -> str:
        acq = await self.store.acquire(self.gen, self.deps.lease_id)
        if isinstance(acq, NotAcquired):
            if acq.verdict == "exhausted":
                self.deps.observer.run_started(resumed=True, job_try=self.job_try)
                self.deps.observer.run_finished(RunStatus.FAILED.value, iterations=0, duration_s=0.0)
            log.info("run %s gen %s not started: %s %s", self.run_id, self.gen, acq.verdict, acq.detail)
            return acq.verdict
        self.deps.active[self.run_id] = self
        self.observed_start = False
        logs.run_context.set({"runId": self.run_id, "attempt": acq.restarts + 1, "epoch": acq.epoch})
        try:
            return await self._run(acq)
        except (FencedError, SeqConflictError) as exc:
            self.deps.observer.append_refused("fenced" if isinstance(exc, FencedError) else "duplicate")
            log.warning("run %s: %s; stopping without writing", self.run_id, exc)
            return "fenced"
        except asyncio.CancelledError:
            await self._cancel_tasks()
            if not self.state.terminal and not self.fenced:
                with contextlib.suppress(Exception):  # best effort; otherwise the lease runs out
                    await asyncio.wait_for(asyncio.shield(self.store.release(self.gen)), 2.0)
            raise
        finally:
            await self._cancel_tasks()
            if self.deps.active.get(self.run_id) is self:  # a job resuming it may already be here
                self.deps.active.pop(self.run_id, None)
            if self.observed_start and not self.state.terminal:
                self.deps.observer.run_left()

    async def _run(self, acq: Acquired) -> str:
        run_input = RunInput.model_validate_json(acq.input)
        if run_input.session_id:
            logs.run_context.set({**(logs.run_context.get() or {}), "sessionId": run_input.session_id})
        self.hints = dict(run_input.runtime_hints or {})
        self.records = acq.tool_records
        resumed = acq.checkpoint is not None
        first: Event
        if acq.checkpoint is not None:
            ck = orjson.loads(acq.checkpoint)
            self.state = RunState.model_validate(ck["state"])
            self.ckpt_seq = int(ck["seq"])
            first = Resumed(now_ms())
        else:
            self.state = machine.initial_state(self.run_id, run_input.session_id)
            try:
                profile = self.deps.profile(run_input.agent)
                tools = self.deps.tools_for(profile)
                self.deps.provider_for(profile)
                cfg = resolve_config(
                    profile, run_input, tools.specs, has_session=run_input.session_id is not None,
                    duration_default_ms=self.deps.settings.run_duration_default_ms,
                    duration_max_ms=self.deps.settings.run_duration_max_ms,
                )  # fmt: skip
            except Exception as exc:  # a bad profile or policy fails the run with a reason
                return await self._fail_unstarted("configuration", f"agent {run_input.agent!r}: {exc}")
            first = Started(now_ms(), cfg, list(run_input.input_messages))
        self.deps.observer.run_started(resumed=resumed, job_try=self.job_try)
        self.observed_start = True
        if resumed and acq.last_seq > self.ckpt_seq:
            # Deltas of a model call that was cut off by a crash: tell readers to drop them.
            self._note(
                "model_call_restarted",
                modelCallIndex=self.state.model_call_index,
                discardAfterSeq=self.ckpt_seq,
                reason="the worker running this model call stopped; the call starts over",
            )
        self.pending.append(first)
        if acq.abort_reason:
            self.abort_reason = acq.abort_reason
            self.pending.append(AbortRequested(now_ms(), acq.abort_reason))
        elif self.state.phase == machine.Phase.AWAITING_HUMAN and acq.approvals:
            decided = {k: v for k, v in acq.approvals.items() if v.get("decision") != "pending"}
            if len(decided) == len(acq.approvals):
                self.pending.append(
                    ApprovalsDecided(
                        now_ms(),
                        {k: v["decision"] == "approved" for k, v in decided.items()},
                        {k: str(v["reason"]) for k, v in decided.items() if v.get("reason")},
                    )
                )
        elif self.state.phase == machine.Phase.AWAITING_TOOLS:
            # The store holds the client's results (and timeout errors for calls past their deadline).
            done = {
                i: self.records[i]
                for i in self.state.client_waiting
                if self.records.get(i, {}).get("state") == "done"
            }
            results = {i: ToolResult.model_validate(r["result"]) for i, r in done.items()}
            self.pending.append(ClientResultsReceived(now_ms(), results))
        return await self._loop()

    async def _loop(self) -> str:
        self._arm_deadline()
        while True:
            if self.fenced:
                raise FencedError(
                    f"run {self.run_id}: this worker gave the run up (its lease lapsed, or another worker took it)"
                )
            if self.pending:
                ev: Event | _Wake = self.pending.popleft()
            elif self.draining and not self.tasks:
                verdict = await self.store.release(self.gen)
                log.info("run %s handed back at a checkpoint (%s)", self.run_id, verdict)
                return "released"
            else:
                ev = await self.inbox.get()
            if isinstance(ev, _Crashed):
                return await self._fail_crashed(ev.exc)
            if isinstance(ev, _Wake):
                continue
            outcome = await self._apply(ev)
            if outcome is not None:
                return outcome
            if isinstance(ev, Started):
                self._arm_deadline()

    async def _apply(self, ev: Event) -> str | None:
        src, since = self.state.node, self.state.node_since_ms
        self.state, cmds = machine.decide(self.state, ev)
        obs = self.deps.observer
        obs.transition(src, self.state.node, type(ev).__name__)
        if self.state.node != src and since:  # time in the node just left, parked time included
            obs.state_time(src, max(0, ev.now_ms - since) / 1000.0)
        outbox = Outbox()
        effects: list[machine.Command] = []
        finish: Finish | None = None
        await_human: AwaitHuman | None = None
        await_client: AwaitClient | None = None
        ts = now_ms()
        for c in cmds:
            if isinstance(c, Emit):
                outbox.events.append((c.kind.value, ts, orjson.dumps(c.payload)))
                self._observe_emit(c)
            elif isinstance(c, ExecuteTool):
                if self.records.get(c.call.id, {}).get("state") != "done":
                    outbox.claims.append(c.call.id)
                effects.append(c)
            elif isinstance(c, Finish):
                finish = c
            elif isinstance(c, AwaitHuman):
                await_human = c
            elif isinstance(c, OfferClientCalls):
                for call in c.calls:
                    rec = {"state": "client_pending", "client": True, "name": call.name, "arguments": call.arguments,
                           "deadlineMs": c.deadlines[call.id], "timeoutMs": c.timeout_ms}  # fmt: skip
                    self.records[call.id] = rec
                    outbox.records.append((call.id, orjson.dumps(rec)))
            elif isinstance(c, AwaitClient):
                await_client = c
            else:
                effects.append(c)
        if isinstance(ev, ToolFinished) and ev.result.tool_call_id in self.done_records:
            outbox.records.append((ev.result.tool_call_id, self.done_records.pop(ev.result.tool_call_id)))
        if finish is not None:
            await self._cancel_tasks()
            await self._commit(
                outbox,
                status=finish.result.status.value,
                aux=encode(finish.result),
                session=self.deps.session_update(self.state, finish.result),
            )
            self._finished(finish.result)
            return finish.result.status.value
        if await_human is not None:
            approvals = {
                c.id: {"decision": "pending", "name": c.name, "arguments": c.arguments}
                for c in await_human.pending
            }
            await self._commit(
                outbox,
                status=RunStatus.AWAITING_HUMAN.value,
                aux=orjson.dumps(approvals),
                approval_timeout_ms=self.state.cfg.approval_timeout_ms,
                run_deadline_ms=self._run_deadline_ms(),
            )
            obs.awaiting_human(1)
            return RunStatus.AWAITING_HUMAN.value
        if await_client is not None:
            # Parked on no worker; the store puts it back on the queue once every call has a
            # result or is past its deadline (at once, if the client was quicker than this commit).
            pending = [{"toolCallId": c.id, "name": c.name, "arguments": c.arguments,
                        "deadlineMs": await_client.deadlines[c.id]} for c in await_client.pending]  # fmt: skip
            await self._commit(outbox, status=RunStatus.AWAITING_TOOLS.value, aux=orjson.dumps(pending))
            return RunStatus.AWAITING_TOOLS.value
        if outbox:
            await self._commit(outbox)
        if isinstance(ev, ApprovalsDecided):
            obs.awaiting_human(-1)
        if self.draining:
            return None  # effects are recomputed from the checkpoint by whoever resumes the run
        if effects and self.deps.lease is not None and self.deps.lease.expired():
            self.fence()  # past the worker's lease: start nothing; whoever takes the run over will
            return None
        for c in effects:
            self._start(c)
        return None

    # ---- commits ----

    async def _commit(
        self,
        outbox: Outbox,
        *,
        status: str = "",
        aux: bytes = b"",
        session: SessionUpdate | None = None,
        approval_timeout_ms: int | None = None,
        run_deadline_ms: int | None = None,
    ) -> None:
        async with self.lock:
            events = _stamped([*self._take_deltas(), *outbox.events])
            last = self.store.last_seq + len(events)
            ckpt = orjson.dumps({"seq": last, "state": self.state.model_dump(mode="json", by_alias=True)})
            await self.store.commit(
                Outbox(events, outbox.claims, outbox.records),
                checkpoint=ckpt,
                status=status,
                aux=aux,
                session=session,
                approval_timeout_ms=approval_timeout_ms,
                run_deadline_ms=run_deadline_ms,
            )
            self.ckpt_seq = last
        for kind, _, _ in events:
            self.deps.observer.event_published(kind)

    def _note(self, status: str, **fields: Any) -> None:
        """An event outside the machine (restart and retry notices): published with the next commit."""
        self.deltas.append((EventKind.STATUS.value, now_ms(), orjson.dumps({"status": status, **fields})))

    def _note_error(self, scope: str, code: str, message: str, **fields: Any) -> None:
        """An ``error`` event outside the machine (a failed tool attempt that is retried)."""
        e = machine.error_event(scope, code, message, **fields)
        self.deltas.append((e.kind.value, now_ms(), orjson.dumps(e.payload)))

    async def _publish_now(self) -> None:
        async with self.lock:
            events = _stamped(self._take_deltas())
            if not events:
                return
            await self.store.commit(Outbox(events))
        failpoints.hit("after_delta_publish")
        for kind, _, _ in events:
            self.deps.observer.event_published(kind)

    def _take_deltas(self) -> list[tuple[str, int, bytes]]:
        out, self.deltas = self.deltas, []
        return out

    # ---- effects ----

    def _start(self, c: machine.Command) -> None:
        if isinstance(c, LoadContext):
            self._spawn(self._load_context(c))
        elif isinstance(c, CallModel):
            self._spawn(self._call_model(c.request))
        elif isinstance(c, Wait):
            self._spawn(self._wait(c.delay_ms))
        elif isinstance(c, ExecuteTool):
            self._spawn(self._run_tool(c.call))
        elif isinstance(c, Compact):
            if self.state.cfg.compaction.use_model:
                self._spawn(self._summarise(c))
            else:
                new, removed = context.compact(c.transcript, c.keep_recent)
                self.pending.append(CompactionDone(now_ms(), new, removed, c.reason))
        else:  # pragma: no cover - the machine emits nothing else
            raise TypeError(f"unknown command {c!r}")

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._effect_done)

    def _effect_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        exc = None if task.cancelled() else task.exception()
        if isinstance(exc, LeaseExpiredError):
            log.warning("run %s: %s; stopping without writing", self.run_id, exc)
            self.fence()
        elif exc is not None:
            log.error("run %s: effect crashed; failing the run", self.run_id, exc_info=exc)
            self.inbox.put_nowait(_Crashed(exc))
            return
        self.inbox.put_nowait(_Wake())

    def _cancel_effects(self) -> None:
        for t in list(self.tasks):
            if not t.cancelling():  # a second cancel would interrupt its clean-up (closing an HTTP stream)
                t.cancel()

    async def _cancel_tasks(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        tasks = list(self.tasks)
        self._cancel_effects()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.tasks.clear()

    def _run_deadline_ms(self) -> int | None:
        """When maxRunDurationMs ends the run (a parked run has no timer: Redis keeps this one)."""
        cfg = self.state.config
        if cfg is None or cfg.max_run_duration_ms is None:
            return None
        return (self.state.started_at_ms or now_ms()) + cfg.max_run_duration_ms

    def _arm_deadline(self) -> None:
        cfg = self.state.config
        if cfg is None or cfg.max_run_duration_ms is None or self.state.terminal:
            return
        start = self.state.started_at_ms or now_ms()
        left_s = max(0.0, (start + cfg.max_run_duration_ms - now_ms()) / 1000.0)
        if self.deadline is not None:
            self.deadline.cancel()
        self.deadline = asyncio.get_running_loop().call_later(
            left_s, lambda: self.inbox.put_nowait(DeadlineReached(now_ms()))
        )

    async def _load_context(self, c: LoadContext) -> None:
        history = await self.deps.load_history(c.session_id, self.state.cfg.context)
        self.inbox.put_nowait(ContextLoaded(now_ms(), history))

    async def _summarise(self, c: Compact) -> None:
        """Compaction by a model call of the profile; a failed summary falls back to truncation."""
        parts = context.split_for_compaction(c.transcript, c.keep_recent)
        summary: str | None = None
        if parts is not None:
            _, middle, _ = parts
            req = ModelRequest(
                run_id=self.run_id,
                session_id=self.state.session_id,
                messages=[
                    Message(role="system", content=SUMMARY_PROMPT),
                    *middle,
                    Message(role="user", content="Write the summary now."),
                ],
                tools=[],
                model_call_index=self.state.model_call_index,
                attempt=0,
                failures=self.state.failures,
                iterations=self.state.iterations,
                purpose="summary",
            )
            try:
                provider = self.deps.provider_for(self.deps.profile(self.state.cfg.agent))
                text: list[str] = []
                ended = False
                held = await self._capacity(req)
                try:
                    async with contextlib.aclosing(provider.stream(req, self.hints)) as chunks:
                        async for ch in chunks:
                            if isinstance(ch, TextDelta):
                                text.append(ch.text)
                            ended = ended or (isinstance(ch, StreamEnd) and ch.finish_reason is not None)
                finally:
                    if held is not None:
                        await held.release(None)
                summary = ("".join(text).strip() or None) if ended else None  # a cut-off summary is none
            except ModelCallError as exc:
                log.warning("run %s: summary call failed (%s); truncating instead", self.run_id, exc)
        new, removed = context.compact(c.transcript, c.keep_recent, summary)
        self.inbox.put_nowait(CompactionDone(now_ms(), new, removed, c.reason))

    async def _wait(self, delay_ms: int) -> None:
        await asyncio.sleep(delay_ms / 1000.0)
        self.inbox.put_nowait(RetryTimerFired(now_ms()))

    async def _call_model(self, req: ModelRequest) -> None:
        obs = self.deps.observer
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        ttft: float | None = None
        self.delta_seq = 0
        self.delta_published = False
        self.last_flush = t0
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        end = StreamEnd()  # a provider that stops without a StreamEnd said nothing about the ending
        held: Held | None = None
        if self.deps.lease is not None:
            self.deps.lease.check("a model call")
        try:
            provider = self.deps.provider_for(self.deps.profile(self.state.cfg.agent))
            held = await self._capacity(req)
            t0 = self.last_flush = loop.time()  # the call starts once it has capacity
            # aclosing: a cancel that lands outside the generator (e.g. while flushing deltas) must
            # still close the provider's HTTP stream at once, not when the generator is collected.
            async with contextlib.aclosing(provider.stream(req, self.hints)) as chunks:
                async for chunk in chunks:
                    if ttft is None:
                        ttft = loop.time() - t0
                        self.inbox.put_nowait(ModelStreamOpened(now_ms()))
                    if isinstance(chunk, TextDelta):
                        text.append(chunk.text)
                        self._delta(req, {"text": chunk.text})
                    elif isinstance(chunk, ReasoningDelta):  # shown to readers, not part of the answer
                        self._delta(req, {"reasoning": chunk.text})
                    elif isinstance(chunk, ToolCallDelta):
                        slot = calls.setdefault(chunk.index, {"id": "", "name": "", "arguments": ""})
                        slot["id"] = slot["id"] or (chunk.id or "")
                        slot["name"] = slot["name"] or (chunk.name or "")
                        slot["arguments"] += chunk.arguments
                        self._delta(req, {"toolCall": {"index": chunk.index, "id": chunk.id, "name": chunk.name,
                                                       "arguments": chunk.arguments}})  # fmt: skip
                    elif isinstance(chunk, StreamEnd):
                        end = chunk
                    if loop.time() - self.last_flush >= self.deps.settings.delta_flush_ms / 1000.0:
                        await self._flush_deltas()
        except ModelCallError as exc:
            self._drop_unpublished_deltas()
            await self._throttled(exc.failure)
            obs.model_call("error", latency_s=loop.time() - t0, ttft_s=ttft)
            self.inbox.put_nowait(
                ModelFailed(now_ms(), exc.failure, random.random(), partial=self.delta_published)
            )
            return
        except asyncio.CancelledError:
            self._drop_unpublished_deltas()
            raise
        except Exception as exc:  # a provider bug must fail the run with a reason, not hang it
            log.exception("run %s: provider crashed", self.run_id)
            self._drop_unpublished_deltas()
            obs.model_call("error", latency_s=loop.time() - t0, ttft_s=ttft)
            failure = ModelFailure(kind="internal", message=f"{type(exc).__name__}: {exc}")
            self.inbox.put_nowait(
                ModelFailed(now_ms(), failure, random.random(), partial=self.delta_published)
            )
            return
        finally:
            if held is not None:
                u = end.usage
                await held.release(u.input_tokens + u.output_tokens if u is not None else None)
        try:
            tool_calls = [
                ToolCall(
                    id=c["id"] or f"call_{req.model_call_index}_{i}",
                    name=c["name"] or "unknown",
                    arguments=c["arguments"] or "{}",
                )
                for i, c in sorted(calls.items())
            ]
            msg = Message(role="assistant", content="".join(text), tool_calls=tool_calls or None)
        except ValidationError as exc:  # over a bound (content, arguments, names): not retried
            obs.model_call("error", latency_s=loop.time() - t0, ttft_s=ttft)
            detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
            failure = ModelFailure(
                kind="invalid", message=f"the model's reply is not a valid message: {detail}"
            )
            self.inbox.put_nowait(
                ModelFailed(now_ms(), failure, random.random(), partial=self.delta_published)
            )
            return
        # A stream that stopped without a finish_reason is no answer: the machine retries it.
        outcome = "success" if end.finish_reason is not None else "error"
        obs.model_call(outcome, latency_s=loop.time() - t0, ttft_s=ttft)
        if end.usage is not None:
            obs.tokens_used(input_tokens=end.usage.input_tokens, output_tokens=end.usage.output_tokens)
        if end.finish_reason is None:
            self._drop_unpublished_deltas()
        self.inbox.put_nowait(
            ModelReplied(now_ms(), msg, end.usage, end.finish_reason, random.random(), self.delta_published)
        )

    async def _capacity(self, req: ModelRequest) -> Held | None:
        """Wait for pool-wide capacity of the profile's provider (worker/limiter.py); None: unlimited."""
        pcfg = self.deps.profile(self.state.cfg.agent).provider
        if not limited(pcfg):
            return None
        t0 = time.monotonic()

        async def on_wait(reason: str, hint_ms: int) -> None:
            self.deps.observer.throttled(reason)
            self._note("waiting_for_capacity", modelCallIndex=req.model_call_index, attempt=req.attempt,
                       reason=reason, waitMs=hint_ms)  # fmt: skip
            await self._publish_now()

        try:
            held = await self.deps.limiter.hold(
                pcfg, policy.request_tokens(req.messages, pcfg.max_tokens), on_wait
            )
        except RedisError as exc:
            raise ModelCallError("connection", f"the provider limiter could not reach Redis: {exc}") from None
        if pcfg.max_concurrent or pcfg.requests_per_minute or pcfg.tokens_per_minute:
            self.deps.observer.capacity_waited(time.monotonic() - t0)
        return held

    async def _throttled(self, f: ModelFailure) -> None:
        """A 429: counted; with Retry-After, no worker calls that endpoint until it has passed."""
        if f.status != 429:
            return
        self.deps.observer.throttled("http_429")
        pcfg = self.deps.profile(self.state.cfg.agent).provider
        if f.retry_after_ms and limited(pcfg):
            with contextlib.suppress(RedisError):
                await self.deps.limiter.pause(
                    pcfg, min(f.retry_after_ms, self.state.cfg.retry.retry_after_cap_ms)
                )

    def _delta(self, req: ModelRequest, body: dict[str, Any]) -> None:
        """Coalesce: consecutive text (or reasoning) fragments merge into one buffered model_delta event."""
        s = self.deps.settings
        field = "text" if "text" in body else "reasoning" if "reasoning" in body else None
        if self.deltas and field is not None:
            kind, ts, raw = self.deltas[-1]
            last = orjson.loads(raw)
            if (
                kind == EventKind.MODEL_DELTA.value
                and field in last
                and len(last[field]) < s.delta_flush_chars
            ):
                last[field] += body[field]
                self.deltas[-1] = (kind, ts, orjson.dumps(last))
                return
        self.delta_seq += 1
        payload = {
            "modelCallIndex": req.model_call_index,
            "attempt": req.attempt,
            "deltaSeq": self.delta_seq,
            **body,
        }
        self.deltas.append((EventKind.MODEL_DELTA.value, now_ms(), orjson.dumps(payload)))

    async def _flush_deltas(self) -> None:
        self.last_flush = asyncio.get_running_loop().time()
        if any(k == EventKind.MODEL_DELTA.value for k, _, _ in self.deltas):
            self.delta_published = True
        await self._publish_now()

    def _drop_unpublished_deltas(self) -> None:
        self.deltas = [d for d in self.deltas if d[0] != EventKind.MODEL_DELTA.value]

    async def _run_tool(self, call: ToolCall) -> None:
        obs = self.deps.observer
        rec = self.records.get(call.id)
        if rec is not None and rec.get("state") == "done":
            obs.tool_served_from_record(call.name)
            self.inbox.put_nowait(ToolFinished(now_ms(), ToolResult.model_validate(rec["result"])))
            return
        attempts = int(rec.get("attempts", 0)) + 1 if rec else 1
        if rec is not None:
            # Claimed by a worker that died before recording a result: run it again, same key.
            obs.tool_reexecuted(call.name)
            self._note("tool_reexecuted", toolCallId=call.id, name=call.name, claim=attempts,
                       reason="the worker executing this call stopped before recording its result")  # fmt: skip
        t0 = time.monotonic()
        ctx = ToolContext(self.run_id, self.state.session_id, call.id, f"{self.run_id}:{call.id}", 1,
                          self.state.cfg.runtime_init_data, fencing_token=self.store.epoch)  # fmt: skip
        if self.deps.lease is not None:
            self.deps.lease.check(f"tool call {call.name}")
        if call.name == RECALL_TOOL:
            result = await self.deps.recall(self.state.session_id, call, self.run_id)
        else:
            tools = self.deps.tools_for(self.deps.profile(self.state.cfg.agent))

            async def on_retry(r: ToolRetry) -> None:
                obs.tool_retry(r.call.name)
                self._note_error(
                    "tool", "tool_attempt_failed", r.reason, retryable=True, toolCallId=r.call.id,
                    name=r.call.name, attempt=r.attempt,
                )  # fmt: skip
                self._note(
                    "tool_retrying",
                    toolCallId=r.call.id,
                    name=r.call.name,
                    attempt=r.attempt,
                    reason=r.reason,
                )

            result = await tools.execute(call, ctx, on_retry)
        obs.tool_call(call.name, "error" if result.is_error else "ok", duration_s=time.monotonic() - t0)
        failpoints.hit("after_tool_effect")
        record = {
            "state": "done",
            "epoch": self.store.epoch,
            "attempts": attempts,
            "result": to_jsonable(result),
        }
        self.done_records[call.id] = orjson.dumps(record)
        self.records[call.id] = record
        self.inbox.put_nowait(ToolFinished(now_ms(), result))

    # ---- endings ----

    def _observe_emit(self, c: Emit) -> None:
        if c.kind == EventKind.STATUS and c.payload.get("status") == "retrying":
            self.deps.observer.model_retry(str(c.payload.get("reason", "unknown")))
        elif c.kind == EventKind.COMPACTION:
            self.deps.observer.compaction(str(c.payload.get("reason", "threshold")))
            self.deps.observer.compaction_removed(
                messages=int(c.payload.get("removed", 0)), tokens=int(c.payload.get("removedTokens", 0))
            )

    def _finished(self, result: RunResult) -> None:
        self.deps.observer.run_finished(
            result.status.value, iterations=result.iterations, duration_s=time.monotonic() - self.started_mono
        )

    async def _fail_crashed(self, exc: BaseException) -> str:
        """An effect crashed (a bug, corrupt data): end the run failed with the reason, never leave
        it running with its lease renewed."""
        await self._cancel_tasks()
        err = RunError(code="internal", message=f"{type(exc).__name__}: {str(exc)[:500]}")
        self.state = self.state.model_copy(
            update={
                "phase": machine.Phase.FAILED,
                "call": machine.CallPhase.NONE,
                "last_error": err,
                "running": [],
            }
        )
        result = machine.result_of(self.state)
        payload = {
            "status": "failed",
            "iterations": self.state.iterations,
            "error": err.model_dump(by_alias=True),
        }
        error = machine.error_event("run", err.code, err.message)
        outbox = Outbox(events=[(EventKind.ERROR.value, now_ms(), orjson.dumps(error.payload)),
                                (EventKind.STATUS.value, now_ms(), orjson.dumps(payload))])  # fmt: skip
        await self._commit(
            outbox, status="failed", aux=encode(result), session=self.deps.session_update(self.state, result)
        )
        self._finished(result)
        return "failed"

    async def _fail_unstarted(self, code: str, message: str) -> str:
        err = RunError(code=code, message=message)
        result = RunResult(session_id=self.state.session_id, run_id=self.run_id, status=RunStatus.FAILED,
                           last_error=err, usage=Usage(), iterations=0)  # fmt: skip
        payload = {"status": "failed", "iterations": 0, "error": err.model_dump(by_alias=True)}
        error = machine.error_event("run", code, message)
        outbox = Outbox(events=[(EventKind.ERROR.value, now_ms(), orjson.dumps(error.payload)),
                                (EventKind.STATUS.value, now_ms(), orjson.dumps(payload))])  # fmt: skip
        self.state = self.state.model_copy(update={"phase": machine.Phase.FAILED, "last_error": err})
        await self._commit(
            outbox, status="failed", aux=encode(result), session=self.deps.session_update(self.state, result)
        )
        self.deps.observer.run_started(resumed=False, job_try=self.job_try)
        self.deps.observer.run_finished("failed", iterations=0, duration_s=0.0)
        return "failed"
