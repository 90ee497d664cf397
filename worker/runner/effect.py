"""What an effect is given, and how it reports back.

An effect (a model call, a tool call, a summary, a session's history, a retry timer) runs as a task
the driver owns and never holds the driver: it gets the run's ``EffectContext`` (its ports, its
commit buffer, the tool records it may read) and the state that asked for it, and reports back only
by posting its outcome to the run's inbox, as Temporal's activities report a completion. The driver
alone changes the run's state, its records and its checkpoint.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentmill_client.limits import DEFAULT_PRIORITY
from shared.construct import with_written_init
from shared.profiles import AgentProfile
from shared.tool_records import ToolRecord
from worker.core.commit_step import Settlement
from worker.machine import Event, RunState, ToolFinished
from worker.ports import Host
from worker.runner.commits import Commits
from worker.runner.run_ports import RunPorts

__all__ = ["EffectContext", "FlushDeltas", "Posted", "ToolRecorded"]


@with_written_init
@dataclass(frozen=True, slots=True)
class FlushDeltas:
    """Posted when a model call's buffered deltas are due out: the driver awaits ``flush`` when it
    next looks, and the flush does nothing if the call's outcome is queued behind by then. A reply
    whose last deltas arrive in the same event-loop turn as its end (a short answer, a final burst)
    then publishes them with its own commit: one write instead of two."""

    flush: Callable[[], Awaitable[None]]


@with_written_init
@dataclass(frozen=True, slots=True)
class ToolRecorded:
    """A tool call's outcome with its record: the driver keeps the record and writes it with the
    commit of the machine's ``ToolFinished`` step."""

    finished: ToolFinished
    record: ToolRecord
    raw: bytes  # the record as stored

    @property
    def call_id(self) -> str:
        return self.finished.result.tool_call_id


Posted = Event | FlushDeltas | ToolRecorded


class EffectContext:
    """One per run, built by its driver: what every effect of the run may use."""

    __slots__ = (
        "agent", "clock", "hints", "host", "out", "ports", "post", "priority", "records", "run_id", "settle",
        "tenant",
    )  # fmt: skip

    def __init__(
        self,
        run_id: str,
        host: Host,
        ports: RunPorts,
        out: Commits,
        records: Mapping[str, ToolRecord],
        post: Callable[[Posted], None],
    ) -> None:
        self.run_id = run_id
        self.host = host  # settings, observer, profiles, the worker's lease
        self.ports = ports
        self.clock = ports.clock
        self.out = out  # the commit buffer: emit, publish_now
        self.records = records  # the run's tool records, read-only here
        self.hints: dict[str, Any] = {}  # the run's runtime hints, set once its input is read
        self.post = post  # the run's inbox
        self.tenant = ""  # the run's tenant ('' = the default tenant), set once it is acquired
        # the version of the tenant's agent it runs, set once it is acquired (None: a file profile)
        self.agent: AgentProfile | None = None
        self.priority = DEFAULT_PRIORITY  # the run's, as capped at submission, set once it is acquired
        self.settle: Settlement | None = None  # a model call's budget settlement for the next step's commit

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def check_lease(self, what: str) -> None:
        """Raises LeaseExpiredError past the worker's lease: the run stops without writing."""
        if self.host.lease is not None:
            self.host.lease.check(what)

    def profile(self, state: RunState) -> AgentProfile:
        if self.agent is not None:
            return self.agent
        if state.cfg.agent_version is not None:  # never a file profile of the same name instead
            raise LookupError(f"version {state.cfg.agent_version} of agent {state.cfg.agent!r} is not kept")
        return self.host.profile(state.cfg.agent)
