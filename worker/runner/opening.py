"""The first events of a job: ``Started`` (or ``StartRejected``) for a new run, ``Resumed`` for a run
taken over from its checkpoint, and the answers that arrived while it was parked.

A new run's opening event (the machine's ``running`` status on ``Started``) is written by the
acquisition that took it (acquire_run.lua, ``Acquired.opened``): ``Opening`` leaves the machine's
own out of the first commit, so the run's first round trip after its claim is its model step's. The
same for a parked run's answer: the script that recorded it wrote its first event (a tool result,
an approval: ``Acquired.answered``), which the machine writes again on taking the answer up."""

from __future__ import annotations

import contextlib
from dataclasses import replace

from agentmill_client.models import EventKind, Message, RunInput
from agentmill_client.statuses import TERMINAL, RunStatus
from shared import checkpoint as checkpoints
from shared.actors import abort_field, system
from shared.children import orphan_reason
from shared.origin import Origin
from shared.profiles import AgentProfile
from shared.quotas import disabled_reason
from shared.schema_compiling import SchemaQueueFullError, compile_all, run_schemas
from shared.settings import Settings
from shared.tool_records import ToolRecord
from worker.core.acquisition import Acquired
from worker.core.config import Lineage, resolve_config
from worker.machine import (
    ApprovalsDecided,
    ChildrenEnded,
    ClientResultsReceived,
    Emit,
    Event,
    Restored,
    Resumed,
    RunState,
    Started,
    StartRejected,
    notices,
    origin_state,
)
from worker.ports import Host, ModelPort, RunStore, ToolPort

__all__ = [
    "Opening",
    "answers",
    "disabled",
    "filled",
    "orphaned",
    "restore",
    "restored",
    "restored_or_rejected",
    "resumed",
    "start",
]

_RUNNING = RunStatus.RUNNING.value  # (an enum's .value, read at every step, is two Python calls)


class Opening:
    """Whether the run's opening event is still the machine's to write: not when its acquisition
    wrote it (``opened``: its seq); nor the first event of the answer that resumed it when the
    answer's script wrote that (``answered``: RunField.ANSWERED, '<seq>:<kind>:<toolCallId>', past
    the checkpoint's ``ckpt_seq``: else a commit of the run holds it already). The machine's own is
    dropped, once each."""

    __slots__ = ("answer", "answered_seq", "written")

    def __init__(self, opened: int, answered: str = "", ckpt_seq: int = 0) -> None:
        self.written = opened > 0
        seq, _, rest = answered.partition(":")
        self.answered_seq = int(seq) if seq and int(seq) > ckpt_seq else 0
        self.answer: tuple[str, str] | None = None
        if self.answered_seq:
            kind, _, call_id = rest.partition(":")
            self.answer = (kind, call_id)

    def since(self, ckpt_seq: int) -> int:
        """The seq of the run's last event a crash cannot have cut off: its checkpoint's, or past it
        its answer's event."""
        return max(ckpt_seq, self.answered_seq)

    def written_already(self, c: Emit) -> bool:
        """Whether ``c`` is an event a script wrote already (each step's events pass here)."""
        if self.written and c.kind == EventKind.STATUS and c.payload.get("status") == _RUNNING:
            self.written = False
            return True
        if self.answer is not None and self.answer == (c.kind._value_, c.payload.get("toolCallId")):
            self.answer = None
            return True
        return False


def restore(
    checkpoint: bytes, config: bytes | None = None, transcript: bytes | None = None
) -> tuple[RunState, int]:
    """The checkpointed state and the seq of the last event committed with it; ``config``: the
    run's configuration (RunField.CONFIG), ``transcript``: its transcript (keys.Partition.transcript),
    for a checkpoint written without them."""
    ck = checkpoints.load(checkpoint, config, transcript)
    assert ck is not None
    return RunState.model_validate(ck["state"]), int(ck["seq"])


def cut_off(acq: Acquired, state: RunState, resumed: bool, ckpt_seq: int) -> list[Emit]:
    """Deltas of a model call cut off by a crash, past the run's checkpoint (``ckpt_seq``: its seq,
    or its answer's event after it, Opening.since; a new run's opening event when it has none yet):
    the notice that tells readers to drop them."""
    since = ckpt_seq if resumed else acq.opened
    if not (resumed or acq.opened) or acq.last_seq <= since:
        return []
    return [notices.model_call_restarted(state.model_call_index if resumed else 1, since)]


def resumed(records: dict[str, ToolRecord], now_ms: int) -> Resumed:
    """The take-over, with the tool results the store holds (the machine serves the ones it needs)."""
    return Resumed(now_ms, {i: res for i, r in records.items() if (res := r.recorded) is not None})


async def agent_of(host: Host, tenant: str, run_input: RunInput) -> AgentProfile | str | None:
    """The version of the tenant's agent the run is pinned to (its input's agentVersion), or why
    it cannot be had; None for a run of a file profile."""
    if run_input.agent_version is None:
        return None
    try:
        return await host.agent(tenant, run_input.agent, run_input.agent_version)
    except LookupError as exc:
        return str(exc)


async def start(
    host: Host,
    tools: ToolPort,
    models: ModelPort,
    run_input: RunInput,
    now_ms: int,
    lineage: bytes = b"",
    agent: AgentProfile | str | None = None,
) -> Event:
    """The run's configuration from its profile (``agent``: its version of a tenant's agent, or why
    there is none: agent_of) and input (and a child run's ``lineage``: its ancestors and depth
    limit); a bad profile or policy rejects the start."""
    s: Settings = host.settings
    if schemas := run_schemas(run_input):
        with contextlib.suppress(SchemaQueueFullError):  # else compiled inline where they are first used
            await compile_all(schema for _, schema in schemas)  # off the loop
    try:
        line = Lineage.model_validate_json(lineage) if lineage else None
        if isinstance(agent, str):
            raise LookupError(agent)
        profile = agent or host.profile(run_input.agent)
        specs = await tools.specs(profile)
        for i in range(len(profile.chain)):  # each provider of its chain is built (and checked) now
            models.provider(profile, i)
        has_session = run_input.session_id is not None
        cfg = host.configs.get_or_resolve(
            profile, specs, run_input, has_session=has_session, lineage=lineage,
            resolve=lambda: resolve_config(
                profile, run_input, specs, has_session=has_session, duration_default_ms=s.run_duration_default_ms,
                duration_max_ms=s.run_duration_max_ms, lineage=line,
            ),
        )  # fmt: skip
    except Exception as exc:  # a bad profile or policy fails the run with a reason
        return StartRejected(now_ms, "configuration", f"agent {run_input.agent!r}: {exc}")
    await tools.keep_listings(cfg)  # before the first commit names them
    return Started(now_ms, cfg, list(run_input.input_messages))


async def filled(
    host: Host, tools: ToolPort, state: RunState, agent: AgentProfile | str | None = None
) -> tuple[RunState, list[Emit]]:
    """A restored state's configuration with its MCP tools' schemas back (its checkpoint names their
    listings), before the machine sees it; a listing no longer kept and listed otherwise now: the
    status events that say so."""
    if state.config is None or all(t.listing is None for t in state.config.tools):
        return state, []
    profile: AgentProfile | None = None
    try:
        profile = (
            host.profile(state.config.agent) if agent is None else None if isinstance(agent, str) else agent
        )
    except Exception:  # the profile is gone: the listings kept are all there is
        profile = None
    config, relisted = await tools.fill_listings(profile, state.config)
    notes = [notices.mcp_tools_relisted(r.server, r.digest, r.now, r.dropped) for r in relisted]
    return state.model_copy(update={"config": config}), notes


def disabled(settings: Settings, acq: Acquired) -> Acquired:
    """A run of a tenant whose quota disables it, taken up (started, woken, taken over): aborted, the
    reason naming the quota (shared.quotas.disabled_reason); its children are aborted with it."""
    if acq.abort_reason or not (why := disabled_reason(settings, acq.tenant)):
        return acq
    return replace(acq, abort_reason=abort_field(why, system("quota")))


async def orphaned(store: RunStore, acq: Acquired) -> Acquired:
    """A child run starting: aborted at once when its parent has ended meanwhile (its creation may
    land after the parent's ending passed an abort on to its children)."""
    parent, status = await store.parent_status()
    if status in TERMINAL:
        return replace(acq, abort_reason=abort_field(orphan_reason(parent, status), system("parent")))
    return acq


def restored(started: Started, run_id: str, origin: bytes, records: dict[str, ToolRecord]) -> Restored:
    """A retry or fork starting (shared.origin): the original's state, from its checkpoint or
    rebuilt from its events up to the fork's seq, with the tool results copied with it."""
    o = Origin.from_json(origin)
    return Restored(
        started.now_ms,
        started.config,
        origin_state(o, run_id, started.input_messages, started.now_ms),
        started.input_messages,
        [Message.model_validate(m) for m in o.append],
        {i: res for i, r in records.items() if (res := r.recorded) is not None},
        o.lineage,
    )


def restored_or_rejected(
    started: Started, run_id: str, origin: bytes, records: dict[str, ToolRecord]
) -> Restored | StartRejected:
    """``restored``; an origin it cannot read fails the run with the reason (never the job)."""
    try:
        return restored(started, run_id, origin, records)
    except Exception as exc:
        return StartRejected(started.now_ms, "restore_failed", f"{type(exc).__name__}: {str(exc)[:500]}")


def answers(state: RunState, acq: Acquired, records: dict[str, ToolRecord], now_ms: int) -> list[Event]:
    """A parked run resumed: the humans' decisions, the client's results (the store holds them,
    with timeout errors for calls past their deadline), or its ended children's results."""
    if state.phase == RunStatus.AWAITING_HUMAN and acq.approvals:
        decided = {k: v for k, v in acq.approvals.items() if v.get("decision") != "pending"}
        if len(decided) == len(acq.approvals):
            return [
                ApprovalsDecided(
                    now_ms,
                    {k: v["decision"] == "approved" for k, v in decided.items()},
                    {k: str(v["reason"]) for k, v in decided.items() if v.get("reason")},
                    {k: v["actor"] for k, v in decided.items() if isinstance(v.get("actor"), dict)},
                )
            ]
    elif state.phase == RunStatus.AWAITING_TOOLS:
        results = {
            i: res for i in state.client_waiting if i in records and (res := records[i].recorded) is not None
        }
        actors = {i: a for i in results if (a := records[i].actor)}
        return [ClientResultsReceived(now_ms, results, actors)]
    elif state.phase == RunStatus.AWAITING_CHILDREN:  # the children's results, delivered to the records
        done = {i: res for i in state.children if i in records and (res := records[i].recorded) is not None}
        usage = {i: u for i in done if (u := records[i].usage) is not None}
        return [ChildrenEnded(now_ms, done, usage)]
    return []
