"""Every multi-key Redis change, as a Lua script registered once per client. The scripts are the
files in shared/lua/ (one per script, its KEYS and ARGV at its top), each run after clock.lua and, for
the scripts on a partition, prelude.lua.

The run hash (keys.Partition.run, its fields shared.fields.RunField) is the source of truth: its
status, gen (dispatch number, one arq job each), epoch (fencing token, taken by every job start),
owner (the lease id of the worker running it), lastSeq (the stream's last seq), ckpt (the machine
state), result. The Lua names hash fields, statuses, event kinds and index dimensions by tokens
(``F.STATUS``, ``S.QUEUED``: ``NAMES``) that ``render`` fills in from the Python enums.

Liveness is per worker, not per run: each worker renews one entry in each partition's workers zset (its
lease expiry) per beat, whatever its number of runs, and keeps the runs it holds in its runs set. A run
is carried while its owner's lease is unexpired; the reconciler re-dispatches the runs of a worker
whose lease expired. Abort requests for a running run go to its owner's inbox, read by the beat.

Guarantees the scripts give:
- the stream holds seq 1..n exactly: every append checks ``lastSeq == first - 1`` and uses the
  entry id ``<seq>-0``, so Redis itself refuses a repeat;
- a writer whose epoch is not the run's current epoch is refused (``fenced``) and writes nothing;
- events, checkpoint, tool claims and tool results of one step land in one atomic commit.

Time comes from Redis (``TIME``), so worker clocks never decide whose lease has expired.
A run that ends with a webhook configured is pushed on its partition's webhook list for delivery.

Every script on a partition touches that partition's slot only: it is called with its own KEYS
followed by the partition's seven fixed keys (``Scripts.frame``), and with the partition's context
as its first ARGV (key prefixes, the arq job template, the settings), so the Lua builds no key
format and reads no setting of its own. The provider limiter's scripts work on one endpoint's keys
and take neither; nor do the schedules' (``schedule_*``), which take a schedule's keys on its partition.
"""

from __future__ import annotations

import functools
import re
from enum import StrEnum
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from agentmill_client import limits
from agentmill_client.models import EventKind
from agentmill_client.statuses import TERMINAL, RunStatus
from shared import dispatch, keys
from shared.fields import BatchField, BudgetField, RunField, ScheduleField, SessionField, UsagePart
from shared.quotas import NANO_USD
from shared.settings import Settings

__all__ = ["CONTEXT_EXTRA", "LUA_DIR", "NAMES", "SCRIPTS", "Scripts", "render", "source", "text"]

LUA_DIR = Path(__file__).with_name("lua")
_ON_PARTITION = ("clock", "prelude")
# Each script's files, in order (submit_one.lua is a function both submits call).
SCRIPTS: dict[str, tuple[str, ...]] = {
    "submit": (*_ON_PARTITION, "submit_one", "submit"),
    "commit": (*_ON_PARTITION, "budget", "commit"),  # budget.lua: a settlement folded into a step
    "budget_settle": ("clock", "budget", "budget_settle"),
    "submit_many": (*_ON_PARTITION, "submit_one", "submit_many"),
    "spawn_child": (*_ON_PARTITION, "submit_one", "spawn_child"),
    "submit_restored": (*_ON_PARTITION, "submit_one", "submit_restored"),
    **{
        name: (*_ON_PARTITION, name)
        for name in (
            "batch_close", "list_runs", "batch_results", "acquire", "beat", "forget_worker", "release", "redispatch",
            "abort", "settle_approval", "tool_results", "child_result", "claim_jobs", "claim_webhooks", "admit_tenant",
            "scaling", "batch_replace", "archive_claim", "archive_done",
        )
    },
    **{
        name: ("clock", name)
        for name in ("capacity_acquire", "capacity_renew", "capacity_release", "capacity_pause", "admit_rate",
                     "budget_reserve", "schedule_create", "schedule_claim", "schedule_advance", "schedule_delete",
                     "schedule_pause")
    },
}  # fmt: skip

# The context's fields after the partition's key prefixes (keys.CONTEXT_FIELDS): the arq job
# template's four pieces (dispatch.JOB_TEMPLATE) and the settings the scripts read.
CONTEXT_EXTRA = (
    "job_a", "job_b", "job_c", "job_d", "maxlen", "retention", "queued_check_ms", "job_expire_ms",
    "index_max", "batch_delivery", "max_run_crashes", "aging_ms", "archive_on", "usage_ttl",
)  # fmt: skip


class Scripts:
    """The scripts registered on one client; call a partition's script with ``frame``:
    ``await scripts.commit(*scripts.frame(part, keys, args))`` (or ``keys=…, args=…`` of it)."""

    submit: AsyncScript
    submit_many: AsyncScript
    spawn_child: AsyncScript
    child_result: AsyncScript
    submit_restored: AsyncScript
    batch_replace: AsyncScript
    list_runs: AsyncScript
    batch_results: AsyncScript
    acquire: AsyncScript
    commit: AsyncScript
    beat: AsyncScript
    forget_worker: AsyncScript
    release: AsyncScript
    redispatch: AsyncScript
    abort: AsyncScript
    settle_approval: AsyncScript
    batch_close: AsyncScript
    tool_results: AsyncScript
    claim_jobs: AsyncScript
    claim_webhooks: AsyncScript
    capacity_acquire: AsyncScript
    capacity_renew: AsyncScript
    capacity_release: AsyncScript
    capacity_pause: AsyncScript
    admit_tenant: AsyncScript
    admit_rate: AsyncScript
    budget_reserve: AsyncScript
    budget_settle: AsyncScript
    scaling: AsyncScript
    schedule_create: AsyncScript
    schedule_claim: AsyncScript
    schedule_advance: AsyncScript
    schedule_delete: AsyncScript
    schedule_pause: AsyncScript
    archive_claim: AsyncScript
    archive_done: AsyncScript

    def __init__(
        self,
        redis: Redis,
        *,
        queued_check_ms: int = 60_000,
        stream_maxlen: int = 10_000,
        retention_s: int = 604_800,
        max_run_crashes: int = 3,
        aging_ms: int = 30_000,
        usage_ttl_s: int = 400 * 86_400,
        archive: bool = False,
    ) -> None:
        for name, text_ in _rendered().items():
            setattr(self, name, redis.register_script(text_))
        extra = {
            **dict(zip(("job_a", "job_b", "job_c", "job_d"), dispatch.JOB_TEMPLATE, strict=True)),
            "maxlen": str(stream_maxlen), "retention": str(retention_s), "queued_check_ms": str(queued_check_ms),
            "job_expire_ms": str(dispatch.JOB_EXPIRE_MS), "index_max": str(limits.MAX_INDEX_RUNS),
            "batch_delivery": keys.BATCH_DELIVERY, "max_run_crashes": str(max_run_crashes),
            "aging_ms": str(aging_ms),
            "archive_on": "1" if archive else "", "usage_ttl": str(usage_ttl_s),
        }  # fmt: skip
        self._extra = keys.SEP.join(extra[f] for f in CONTEXT_EXTRA) + keys.SEP
        self._contexts: dict[int, str] = {}

    @classmethod
    def for_settings(cls, redis: Redis, settings: Settings) -> Scripts:
        """The scripts with the deployment's settings in their context (what they read from it:
        the queued-run check, the stream bound, the retention, the crash budget, whether finished
        runs go to the archive, how long a tenant's usage of a day is kept)."""
        return cls(
            redis,
            queued_check_ms=settings.queued_check_ms,
            stream_maxlen=settings.stream_maxlen,
            retention_s=settings.retention_s,
            max_run_crashes=settings.max_run_crashes,
            aging_ms=settings.priority_aging_ms,
            usage_ttl_s=settings.usage_retention_days * 86_400,
            archive=bool(settings.archive_url),
        )

    def context(self, part: keys.Partition) -> str:
        """The first ARGV of every script on ``part``."""
        c = self._contexts.get(part.index)
        if c is None:
            c = self._contexts[part.index] = part.context + self._extra
        return c

    def frame(
        self, part: keys.Partition, own_keys: list[Any], args: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        """(KEYS, ARGV) of a script call on ``part``: its own keys then the partition's fixed keys
        (prelude.lua takes them off again), the partition's context then its own arguments."""
        fixed = [
            part.queue,
            part.live,
            part.awaiting,
            part.workers,
            part.webhooks,
            part.scheduled,
            part.depth,
        ]
        return [*own_keys, *fixed], [self.context(part), *args]


# The names the scripts spell as ``<namespace>.<MEMBER>`` tokens (``F.STATUS``, ``S.QUEUED``), each
# rendered as the quoted value: the facts Python declares, stated once.
NAMES: dict[str, type[StrEnum]] = {
    "F": RunField,  # the run hash's fields
    "S": RunStatus,
    "BATCH": BatchField,
    "SESSION": SessionField,
    "SCHED": ScheduleField,  # a schedule hash's fields
    "BUDGET": BudgetField,  # a tenant's day budget
    "EVENT": EventKind,  # a stream entry's kind
    "USAGE": UsagePart,  # what a tenant's usage hash of a day counts per agent
}
_DIMS = {d.upper(): d for d in keys.INDEX_DIMS}  # DIM.STATUS: a listing index's dimension
_NAME_TOKEN = re.compile(r"\b(F|S|BATCH|SESSION|SCHED|BUDGET|EVENT|USAGE|DIM)\.([A-Z][A-Z0-9_]*)\b")


def _name(m: re.Match[str]) -> str:
    space, member = m.group(1), m.group(2)
    values = _DIMS if space == "DIM" else {e.name: e.value for e in NAMES[space]}
    if member not in values:
        raise ValueError(f"the Lua names {space}.{member}: no such member")
    return f"'{values[member]}'"


@functools.cache
def source(name: str) -> str:
    """A script's source as written, its tokens not filled in yet."""
    return "".join((LUA_DIR / f"{part}.lua").read_text() for part in SCRIPTS[name])


def render(text_: str) -> str:
    """A script's text with the schema's constants filled in (the context's field names, the
    terminal statuses, the hash fields, statuses and the other names of ``NAMES``): code, not
    settings. A token naming no member raises ValueError."""
    tokens = {
        "__CONTEXT_FIELDS__": ", ".join(f"'{f}'" for f in (*keys.CONTEXT_FIELDS, *CONTEXT_EXTRA)),
        "__TERMINAL__": ", ".join(f"{s.value}=true" for s in sorted(TERMINAL)),
        "__DEFAULT_PRIORITY__": str(limits.DEFAULT_PRIORITY),
        "__NANO_USD__": str(NANO_USD),
    }
    for token, value in tokens.items():
        text_ = text_.replace(token, value)
    return _NAME_TOKEN.sub(_name, text_)


@functools.cache
def _rendered() -> dict[str, str]:
    return {name: render(source(name)) for name in SCRIPTS}


def text(value: Any) -> str:
    """Decode a script reply element (bytes from a client without decode_responses)."""
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)
