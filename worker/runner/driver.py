"""RunDriver: ask the machine what to do, do it, commit, feed the outcome back.

One ``RunDriver`` drives one run for one job. Each transition's events, the checkpoint, tool
claims and tool results go to the store in one fenced commit before any effect it asked for starts,
so a crash at any point resumes from the last commit: a checkpointed model reply is never asked
for again, a recorded tool result is never executed again. The driver reaches the world only
through the ports it is given (worker/ports.py). Its effects (effects.py, model_call.py, tool_call.py)
get the run's ``EffectContext``, never the driver, and report back through its inbox (effect.py);
their tasks are owned by the run's ``EffectTasks`` (effect_tasks.py). The ending's commit and
hand-off are in ending.py.

One exception, the ``behind`` mode (``AGENTMILL_MODEL_COMMIT``): a retry's or fork's start step,
whose one effect is a model call, sends its commit and starts the call without waiting for the
reply (a crash before it redoes the step). The reply is awaited before anything else goes out
(Commits.landed); a refused one stops the run as a refused commit does, the call cancelled.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Coroutine

import orjson

from agentmill_client.models import RunStatus
from shared import logs
from shared.actors import abort_of
from shared.calls.steps import AcquireVerdict
from shared.off_loop import large, off_loop
from shared.stored_input import read_input
from shared.tool_records import ToolRecord
from worker import machine
from worker.core.acquisition import Acquired, NotAcquired
from worker.core.commit_step import Outbox
from worker.core.store_errors import FencedError, SeqConflictError
from worker.machine import (
    AbortRequested,
    ApprovalsDecided,
    AwaitChildren,
    AwaitClient,
    AwaitHuman,
    AwaitModel,
    EffectCrashed,
    Emit,
    Event,
    ExecuteTool,
    Finish,
    OfferClientCalls,
    Restored,
    Resumed,
    Started,
    StartRejected,
)
from worker.ports import Host
from worker.runner import ending, hearing, opening
from worker.runner.commits import Commits
from worker.runner.deadline import RunDeadline
from worker.runner.effect import EffectContext, FlushDeltas, ToolRecorded
from worker.runner.effect_tasks import Crashed, EffectTasks, Wake
from worker.runner.effects import model_only
from worker.runner.effects import start as start_effect
from worker.runner.hand_back import hand_back, released
from worker.runner.holding import FlushHeld, StepHold
from worker.runner.inbox import Inbox
from worker.runner.parking import Park, parking
from worker.runner.run_ports import RunPorts
from worker.telemetry import tracing
from worker.tools.declared import declared_settings

__all__ = ["RunDriver"]

log = logging.getLogger("agentmill.runner")


class RunDriver:
    # A run whose loop waits with no effect running and nothing pending is stuck: only an effect posts
    # what moves it on (the worker's signals, abort, drain and fence, are handled as they come). Seen
    # once in the cluster chaos test, a run held for four minutes by a live worker until its drain
    # released it; the cause is not found. After this long the run is handed back at its checkpoint,
    # as a drain would, and whoever takes it resumes it; the error log names where it stood.
    stall_s = 20.0

    def __init__(self, host: Host, ports: RunPorts, run_id: str, gen: int, job_try: int = 1) -> None:
        self.host = host
        self.ports = ports
        self.clock = ports.clock
        self.run_id = run_id
        self.gen = gen
        self.job_try = job_try
        self.store = ports.store
        self.inbox: Inbox[Event | Wake | FlushHeld | FlushDeltas | ToolRecorded] = Inbox()
        self.pending: deque[Event] = deque()
        self.effects = EffectTasks(run_id, self.inbox.put_nowait, self)
        self.tasks = self.effects.tasks  # running effects; a drain waits for them
        self.state = machine.initial_state(run_id)
        self.records: dict[str, ToolRecord] = {}
        cfg = host.settings
        self.out = Commits(self.store, self.clock, host.observer, failpoints=host.failpoints,
                           config_apart=cfg.checkpoint_config == "apart",
                           transcript_apart=cfg.checkpoint_transcript == "apart")  # fmt: skip
        self.fx = EffectContext(run_id, host, ports, self.out, self.records, self.inbox.put_nowait)
        self.deadline = RunDeadline(self.clock, self.inbox.put_nowait)
        self.hold = StepHold(cfg.step_hold_ms, self.inbox.put_nowait)  # steps that may wait to commit
        self.started_mono = self.clock.monotonic()
        self.draining = False
        self.fenced = False
        self.deleted = False  # fenced because the run was deleted: its job leaves no result
        self.abort_reason: str | None = None
        self.observed_start = False
        self.is_child = False  # a sub-agent's run: its ending goes to its parent
        self.model_commit = cfg.model_commit  # "behind": a model call starts with its step's commit
        self.opening = opening.Opening(0)  # the run's opening event: the machine's to write, or written

    # ---- signals from the worker (lease keeper, shutdown) ----

    def request_abort(self, reason: str) -> None:
        """``reason``: the run's abort field (its reason, or with who aborts: shared.actors.abort_of)."""
        if self.abort_reason is None and not self.state.terminal:
            why, actor = abort_of(reason)
            self.abort_reason = why or "aborted by request"
            self.effects.cancel()
            self.inbox.put_nowait(AbortRequested(self.clock.now_ms(), self.abort_reason, actor))

    def fence(self, *, deleted: bool = False) -> None:
        """Stop without writing: the run is no longer this worker's (``deleted``: nor anyone's)."""
        self.deleted = deleted
        self.fenced = True
        self.effects.cancel()
        self.inbox.put_nowait(Wake())

    def drain(self) -> None:
        self.draining = True
        self.inbox.put_nowait(Wake())

    def cancel_effects_for_shutdown(self) -> None:
        self.effects.cancel()
        self.inbox.put_nowait(Wake())

    # ---- the job ----

    async def run(self, active: dict[str, RunDriver] | None = None) -> str:
        """The job; ``active``: the runs the worker process drives now, which this one joins while it runs."""
        obs = self.host.observer
        acq = await self.store.acquire(self.gen, self.host.lease_id)
        if isinstance(acq, NotAcquired):
            if acq.verdict == AcquireVerdict.EXHAUSTED:
                obs.run_started(resumed=True, job_try=self.job_try)
                obs.run_finished(RunStatus.FAILED.value, iterations=0, duration_s=0.0)
            log.info("run %s gen %s not started: %s %s", self.run_id, self.gen, acq.verdict, acq.detail)
            return acq.verdict
        if active is not None:
            active[self.run_id] = self
        if self.host.draining:  # started after the worker's drain began (a claim's later chunks)
            self.drain()
        self.observed_start = False
        logs.run_context.set({"runId": self.run_id, "attempt": acq.restarts + 1, "epoch": acq.epoch})
        try:
            return await tracing.attempt(self.run_id, self.gen, acq, self._run)  # in its span, if traced
        except (FencedError, SeqConflictError) as exc:
            lapsed = self.host.lease is not None and self.host.lease.expired()  # stopped on its deadline
            obs.append_refused("fenced" if isinstance(exc, FencedError) else "duplicate")
            log.warning("run %s: %s; stopping without writing", self.run_id, exc)
            if isinstance(exc, SeqConflictError) and not self.fenced:
                await self._hand_back(5.0)  # still ours; Redis lost a write it acknowledged (a failover)
            elif lapsed and not (isinstance(exc, FencedError) and exc.deleted):
                await self._cancel_tasks()  # its effects stopped before another worker may take it over
                await self._hand_back(2.0, lost=True)
            return "deleted" if isinstance(exc, FencedError) and exc.deleted else "fenced"
        except asyncio.CancelledError:
            await self._cancel_tasks()
            if not self.state.terminal and not self.fenced:
                await self._hand_back(2.0)
            raise
        except Exception:  # the job fails: the run goes back, a lost attempt (else it stays 'running'
            await self._cancel_tasks()  # under this worker's live lease, which no sweep looks past)
            if not self.fenced:
                await self._hand_back(2.0, lost=True)
            raise
        finally:
            await self._cancel_tasks()
            if active is not None and active.get(self.run_id) is self:
                active.pop(self.run_id, None)  # unless a job resuming it is already here
            if self.observed_start and not self.state.terminal:
                obs.run_left()

    async def _released(self) -> str:
        """The run back on the queue at its last checkpoint, its loop done (a drain, a stall)."""
        await self._flush_held()
        return await released(self.run_id, self.out, self.store, self.gen)

    async def _hand_back(self, within_s: float, *, lost: bool = False) -> None:
        obs = self.host.observer if lost else None
        await hand_back(self.run_id, self.out, self.store, self.gen, within_s, lost=obs)

    async def _run(self, acq: Acquired) -> str:
        if acq.unreadable:  # sealed with a data key no longer listed: the run fails, its job does not
            self.host.observer.run_started(resumed=False, job_try=self.job_try)
            self.observed_start = True
            self.pending.append(StartRejected(self.clock.now_ms(), "data_key_unavailable", acq.unreadable))
            return await self._loop()
        big = large(acq.input, acq.origin)  # a fork of a large transcript: parsed off the loop
        parse = functools.partial(read_input, acq.input)  # stored validated: read as it stands
        run_input = await off_loop(parse) if big else parse()
        if run_input.session_id:
            logs.run_context.set({**(logs.run_context.get() or {}), "sessionId": run_input.session_id})
        self.fx.hints = dict(run_input.runtime_hints or {})
        self.is_child = bool(acq.ancestry)
        self.fx.tenant = acq.tenant
        agent = await opening.agent_of(self.host, acq.tenant, run_input)  # a tenant's agent's version
        self.fx.agent = agent if not isinstance(agent, str) else None
        self.fx.priority = acq.priority
        self.records.update(acq.tool_records)
        resumed = acq.checkpoint is not None
        now = self.clock.now_ms()
        first: Event
        if acq.checkpoint is not None:
            self.state, self.out.ckpt_seq = opening.restore(acq.checkpoint, acq.config, acq.transcript)
            self.state, relisted = await opening.filled(self.host, self.ports.tools, self.state, agent)
            for note in relisted:
                self.out.emit(note)
            first = opening.resumed(self.records, now)
        else:
            if run_input.session_id:  # the state built with the driver, not a second one
                self.state = self.state.model_copy(update={"session_id": run_input.session_id})
            first = await opening.start(
                self.host, self.ports.tools, self.ports.models, run_input, now, acq.ancestry, agent
            )
            if acq.origin and isinstance(first, Started):  # a retry or fork: from the original's state
                restore = functools.partial(
                    opening.restored_or_rejected, first, self.run_id, acq.origin, self.records
                )
                first = await off_loop(restore) if big else restore()
        self.host.observer.run_started(resumed=resumed, job_try=self.job_try)
        self.observed_start = True
        self.opening = opening.Opening(0 if resumed else acq.opened, acq.answered, self.out.ckpt_seq)
        self.out.emit(*opening.cut_off(acq, self.state, resumed, self.opening.since(self.out.ckpt_seq)))
        self.pending.append(first)
        if not acq.abort_reason and acq.ancestry and acq.checkpoint is None:
            acq = await opening.orphaned(self.store, acq)  # a child created after its parent ended
        acq = opening.disabled(self.host.settings, acq)  # its tenant disabled since: aborted
        if acq.abort_reason:
            self.abort_reason, actor = abort_of(acq.abort_reason)
            self.pending.append(AbortRequested(now, self.abort_reason, actor))
        else:
            self.pending.extend(opening.answers(self.state, acq, self.records, now))
        return await self._loop()

    async def _loop(self) -> str:
        self.deadline.arm(self.state)
        while True:
            if self.fenced:
                raise FencedError(
                    f"run {self.run_id}: this worker gave the run up (its lease lapsed, another worker took it, "
                    "or it was deleted)",
                    deleted=self.deleted,
                )
            if self.out.refused():
                await self.out.landed()  # raises the refusal
            if self.pending:
                ev: Event | Wake | FlushHeld | FlushDeltas | ToolRecorded = self.pending.popleft()
            elif self.draining and not self.tasks and not self.inbox:  # what the effects posted first
                return await self._released()
            elif self.tasks:
                ev = await self.inbox.get()
            elif (got := await self.inbox.get_within(self.stall_s)) is not None:
                ev = got
            else:  # nothing running and nothing came: only an effect could have posted (stall_s)
                log.error("run %s: nothing running and nothing to do for %g s in %s (phase %s, call %s); "
                          "handing it back at its checkpoint", self.run_id, self.stall_s, self.state.node,
                          self.state.phase, self.state.call)  # fmt: skip
                return await self._released()
            if isinstance(ev, Crashed):
                await self._cancel_tasks()
                ev = EffectCrashed(self.clock.now_ms(), f"{type(ev.exc).__name__}: {str(ev.exc)[:500]}")
            if isinstance(ev, Wake):
                continue
            if isinstance(ev, FlushDeltas):
                await ev.flush()
                continue
            if isinstance(ev, FlushHeld):
                await self._flush_held()
                continue
            outcome = await self._apply(ev)
            if outcome is not None:
                return outcome
            if isinstance(ev, (Started, Restored)):
                self.deadline.arm(self.state)

    async def _apply(self, ev: Event | ToolRecorded) -> str | None:
        recorded: tuple[str, bytes] | None = None
        if isinstance(ev, ToolRecorded):  # a tool call's outcome: its record is written with this step
            self.records[ev.call_id] = ev.record
            recorded, ev = (ev.call_id, ev.raw), ev.finished
        src, since = self.state.node, self.state.node_since_ms
        self.state, cmds = machine.decide(self.state, ev)
        obs = self.host.observer
        hearing.transition(obs, src, since, self.state.node, type(ev).__name__, ev.now_ms)
        outbox = Outbox()
        effects: list[machine.Command] = []
        finish: Finish | None = None
        park: Park | None = None
        ts = self.clock.now_ms()
        draining, resumed = self.draining, isinstance(ev, Resumed)
        for c in cmds:
            if isinstance(c, Emit):
                if not self.opening.written_already(c):
                    outbox.events.append((c.kind._value_, ts, orjson.dumps(c.payload)))
                else:  # its claim published it
                    obs.event_published(c.kind._value_)
                hearing.emitted(
                    obs, c, resumed=resumed, agent=self.state.config.agent if self.state.config else ""
                )
            elif isinstance(c, ExecuteTool):
                if not draining:  # a drain neither claims nor starts a call: whoever resumes the run does
                    outbox.claims.append(c.call.id)
                    effects.append(c)
            elif isinstance(c, Finish):
                finish = c
            elif isinstance(c, (AwaitHuman, AwaitClient, AwaitChildren, AwaitModel)):
                park = c
            elif isinstance(c, OfferClientCalls):
                for call in c.calls:
                    rec = ToolRecord.offered(
                        call, c.deadlines[call.id], c.timeout_ms, self.state.round_called_at_ms
                    )
                    self.records[call.id] = rec
                    outbox.records.append((call.id, rec.to_json()))
            else:
                effects.append(c)
        if recorded is not None:
            outbox.records.append(recorded)
        if outbox and self.fx.settle is not None:  # a model call's budget settlement: with its reply
            outbox.settle, self.fx.settle = self.fx.settle, None
        if finish is not None:
            await self._cancel_tasks()
            owes = self.is_child or bool(self.state.children)  # what the ending owes a parent or children
            await ending.end(self.fx, self.state, outbox, finish.result, self.started_mono, hand_off=owes)
            return finish.result.status._value_
        if park is not None:  # on no worker until the answer's script puts it back on the queue
            p = parking(park, self.state, self.deadline.at_ms(self.state))
            await self.out.step(self.state, outbox, status=p.status, aux=p.aux,
                                approval_timeout_ms=p.approval_timeout_ms, run_deadline_ms=p.run_deadline_ms)  # fmt: skip
            self.hold.disarm()
            if isinstance(park, AwaitHuman):
                obs.awaiting_human(1)
            return p.status
        settings = lambda name: declared_settings(self.fx.profile(self.state), name)  # noqa: E731
        if self.hold.allows(effects, settings, holding=self.out.holding, draining=self.draining):
            self.out.hold(self.state, outbox)
            self.hold.arm()
        elif outbox and self._behind(effects, outbox):
            self.out.send(self.state, outbox, lambda: self.inbox.put_nowait(Wake()))
        elif outbox or (effects and self.out.holding):
            await self.out.step(self.state, outbox)
            self.hold.disarm()
        if isinstance(ev, ApprovalsDecided):
            obs.awaiting_human(-1)
        if self.draining:
            # Effects are recomputed from the checkpoint by whoever resumes the run, except the tool
            # calls this step claimed (the drain began during its commit): a claim without a result
            # would be executed again there, so they run here, within the drain timeout.
            effects = [c for c in effects if isinstance(c, ExecuteTool)]
            if not effects:
                return None
        if effects and self.host.lease is not None and self.host.lease.expired():
            self.fence()  # past the worker's lease: start nothing; whoever takes the run over will
            return None
        if effects and not model_only(effects):
            await self.out.landed()  # only a model call starts ahead of a commit's reply
        for c in effects:
            started = start_effect(self.fx, self.state, c)
            if isinstance(started, Coroutine):
                self.effects.spawn(started)
            else:  # answered without I/O
                self.pending.append(started)
        return None

    def _behind(self, effects: list[machine.Command], outbox: Outbox) -> bool:
        """Whether this step's commit may go out behind its model call (``model_commit``): nothing
        held, no drain, no claim, tool record or budget settlement in it, and a model call its only
        effect (a context with nothing to load is answered inline)."""
        return (
            self.model_commit == "behind"
            and not (self.draining or self.out.holding or outbox.claims or outbox.records or outbox.settle)
            and model_only(effects)
        )

    async def _flush_held(self) -> None:
        self.hold.disarm()
        await self.out.flush_held()

    # ---- effects ----

    async def _cancel_tasks(self) -> None:
        self.deadline.cancel()
        self.hold.disarm()
        await self.effects.cancelled()
