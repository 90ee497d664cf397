"""Every multi-key Redis change, as a Lua script registered once per client. The scripts are the
files in shared/lua/ (one per script, its KEYS and ARGV at its top), each run after clock.lua and, for
the scripts on a partition, prelude.lua.

The run hash (keys.Partition.run, its fields shared.fields.RunField) is the source of truth: its
status, gen (dispatch number, one arq job each), epoch (fencing token, taken by every job start),
owner (the lease id of the worker running it), lastSeq (the stream's last seq), ckpt (the machine
state), result. The Lua names hash fields, statuses, event kinds and index dimensions by tokens
(``F.STATUS``, ``S.QUEUED``, ``TS.DONE``: ``NAMES``) that ``render`` fills in from the Python enums.

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
followed by the partition's eight fixed keys, and with the partition's context as its last ARGV
(key prefixes, the arq job template, the settings), so the Lua builds no key format and reads no
setting of its own: ``Scripts.framing`` frames such a call (shared.script_sending, where calls are
sent too). The provider limiter's scripts work on one endpoint's keys
and take neither; nor do the schedules' (``schedule_*``), which take a schedule's keys on its partition.

Two ways to run them (shared.functions, AGENTMILL_REDIS_FUNCTIONS): by EVALSHA, each script's files
concatenated, or as one Redis Functions library (Redis >= 7) of every script in ``SCRIPTS``, with no
code per script: a script's files but the last (clock.lua, prelude.lua, submit_one.lua, acquire_run.lua) are the
library's shared code, run once when it loads; its last file becomes the body of its function. A
shared file whose locals a call changes defines ``enter_<file>(KEYS, ARGV)``, which resets them: it
runs at the start of each call, before the body, both ways.
"""

from __future__ import annotations

import functools
import hashlib
import re
from enum import StrEnum
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from agentmill_client import limits
from agentmill_client.inputs import MultitaskStrategy
from agentmill_client.models import EventKind
from agentmill_client.statuses import TERMINAL, RunStatus
from shared import functions, index_keys, keys, listing_row, off_loop
from shared.calls import CALLS
from shared.calls.base import bind
from shared.calls.budgets import SCALE_ONE, BudgetLimit
from shared.calls.dispatch import RedispatchReason
from shared.calls.steps import AcquireVerdict, AppendVerdict
from shared.calls.submission import bind_new_run
from shared.fields import (
    BatchField,
    BudgetField,
    EconomyBatchField,
    EconomyBatchState,
    EconomyUsagePart,
    RunField,
    ScheduleField,
    SessionField,
    UsagePart,
)
from shared.functions import EvalScript, FunctionScript, Library, Script
from shared.quotas import NANO_USD
from shared.replies import text
from shared.script_sending import CONTEXT_EXTRA, Framing
from shared.session_calls import CONTEXT_TOOLS, PastCallField
from shared.settings import Settings, get_settings
from shared.tool_records import ToolState

__all__ = [
    "CONTEXT_EXTRA", "LUA_DIR", "NAMES", "SCRIPTS", "Scripts", "library", "library_source", "prepare_scripts",
    "render", "source", "text", "warm",
]  # fmt: skip

LUA_DIR = Path(__file__).with_name("lua")
_ON_PARTITION = ("clock", "prelude")
# Each script's files, in order (submit_one.lua is a function both submits call).
SCRIPTS: dict[str, tuple[str, ...]] = {
    "submit": (*_ON_PARTITION, "submit_one", "submit"),
    "commit": (*_ON_PARTITION, "budget", "commit"),  # budget.lua: a settlement folded into a step
    "publish": (*_ON_PARTITION, "publish"),  # events alone (a model's deltas): commit.lua's gate
    "budget_settle": ("clock", "budget", "budget_settle"),
    "submit_many": (*_ON_PARTITION, "submit_one", "submit_many"),
    "spawn_child": (*_ON_PARTITION, "submit_one", "spawn_child"),
    "admit_submit": (*_ON_PARTITION, "rate_bucket", "submit_one", "admit_submit"),  # a submission admitted
    "admit_rate": ("clock", "rate_bucket", "admit_rate"),
    "submit_restored": (*_ON_PARTITION, "submit_one", "submit_restored"),
    "acquire": (*_ON_PARTITION, "acquire_run", "acquire"),
    "claim_jobs": (*_ON_PARTITION, "acquire_run", "claim_jobs"),  # a claimed job's run taken at once
    **{
        name: (*_ON_PARTITION, name)
        for name in (
            "batch_close", "list_runs", "batch_results", "beat", "forget_worker", "release", "redispatch",
            "abort", "settle_approval", "tool_results", "child_result", "claim_webhooks", "admit_tenant",
            "scaling", "batch_replace", "archive_claim", "archive_done", "tree_admit", "delete_run",
            "tool_cache_put", "deletion_claim", "model_reply",
        )
    },
    **{
        name: ("clock", name)
        for name in ("capacity_acquire", "capacity_renew", "capacity_release", "capacity_pause",
                     "rate_slots", "idempotency_claim", "budget_reserve", "schedule_rate", "live_tenants",
                     "agent_create", "agent_point", "econ_enqueue", "econ_close", "econ_advance", "econ_done",
                     "econ_lease")
    },
    **{
        name: ("clock", "schedule_due", name)
        for name in ("schedule_create", "schedule_claim", "schedule_advance", "schedule_delete", "schedule_pause")
    },
}  # fmt: skip


class Scripts:
    """The scripts registered on one client; a partition's script is called framed
    (``framing``, shared.script_sending) and sent through the partitions:
    ``await run_script(parts, scripts.commit, *scripts.framing.call(part, keys, args))``.
    Each is a function of the library or a script run by EVALSHA (``functions``: as given, else as
    AGENTMILL_REDIS_FUNCTIONS says, auto following what start-up chose: ``prepare_scripts``)."""

    submit: Script
    submit_many: Script
    spawn_child: Script
    admit_submit: Script
    tree_admit: Script
    child_result: Script
    submit_restored: Script
    batch_replace: Script
    list_runs: Script
    batch_results: Script
    acquire: Script
    commit: Script
    publish: Script
    beat: Script
    forget_worker: Script
    release: Script
    redispatch: Script
    abort: Script
    settle_approval: Script
    batch_close: Script
    tool_results: Script
    claim_jobs: Script
    claim_webhooks: Script
    capacity_acquire: Script
    capacity_renew: Script
    capacity_release: Script
    capacity_pause: Script
    admit_tenant: Script
    admit_rate: Script
    rate_slots: Script
    idempotency_claim: Script
    budget_reserve: Script
    budget_settle: Script
    scaling: Script
    schedule_create: Script
    schedule_claim: Script
    schedule_advance: Script
    schedule_delete: Script
    schedule_pause: Script
    schedule_rate: Script
    live_tenants: Script
    archive_claim: Script
    archive_done: Script
    delete_run: Script
    tool_cache_put: Script
    deletion_claim: Script
    agent_create: Script
    agent_point: Script
    model_reply: Script
    econ_enqueue: Script
    econ_close: Script
    econ_advance: Script
    econ_done: Script
    econ_lease: Script

    def __init__(
        self,
        redis: Redis,
        settings: Settings | None = None,
        *,
        functions: bool | None = None,
        mode: str | None = None,
    ) -> None:
        """``settings``: what the scripts read from their context (the queued-run check, the stream
        bound, the retention, the crash budget, the priority aging, whether finished runs go to the
        archive, how long a tenant's usage of a day is kept); None: the settings' declared defaults,
        whatever the environment says."""
        self._by_eval: dict[str, Script] = {n: EvalScript(redis, t) for n, t in _rendered().items()}
        lib = library()
        self._by_fcall: dict[str, Script] = {
            n: FunctionScript(redis, lib, n, framed="prelude" in parts) for n, parts in SCRIPTS.items()
        }
        self._fixed = functions
        self._mode = mode
        self.framing = Framing(settings)  # how a call on a partition is framed (shared.script_sending)

    @property
    def functions(self) -> bool:
        """Are the scripts run as the library's functions (else by EVALSHA)?"""
        if self._fixed is not None:
            return self._fixed
        if self._mode is None:
            self._mode = get_settings().redis_functions
        return functions.use_functions(self._mode)

    def __getattr__(self, name: str) -> Script:
        if name.startswith("_") or name not in SCRIPTS:
            raise AttributeError(name)
        script = (self._by_fcall if self.functions else self._by_eval)[name]
        if self._fixed is not None or self._mode != "auto" or functions.chosen() is not None:
            setattr(self, name, script)  # the choice is final: looked up directly from now on
        return script

    @classmethod
    def for_settings(cls, redis: Redis, settings: Settings) -> Scripts:
        """The scripts with the deployment's settings in their context, run the way they choose
        (AGENTMILL_REDIS_FUNCTIONS)."""
        return cls(redis, settings, mode=settings.redis_functions)

    def context(self, part: keys.Partition) -> str:
        """The last ARGV of every script on ``part`` (``framing.context``)."""
        return self.framing.context(part)

    def frame(
        self, part: keys.Partition, own_keys: list[Any], args: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        """(KEYS, ARGV) of a script call on ``part`` (``framing.frame``, for the callers not moved to
        it yet)."""
        return self.framing.frame(part, own_keys, args)


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
    "EUSAGE": EconomyUsagePart,  # of those counts, the economy lane's share
    "CALL": PastCallField,  # an entry of a session's calls list (shared/session_calls.py)
    "TS": ToolState,  # a tool record's state (shared/tool_records.py)
    "EB": EconomyBatchField,  # an economy batch's hash (worker/economy/)
    "ES": EconomyBatchState,
    "LIMIT": BudgetLimit,  # the day's limit a budget hold was refused for
    "REASON": RedispatchReason,  # why the reconciler re-dispatched a run
    "ACQ": AcquireVerdict,  # acquire_run.lua's answer (shared code: no call's V.*)
    "APPEND": AppendVerdict,  # an append's gate (prelude.lua's append_refused)
    "MULTI": MultitaskStrategy,  # a session's multitask strategy
}
_DIMS = {d.upper(): d for d in index_keys.INDEX_DIMS}  # DIM.STATUS: a listing index's dimension
_NAME_TOKEN = re.compile(rf"\b({'|'.join([*NAMES, 'DIM'])})\.([A-Z][A-Z0-9_]*)\b")
# Each namespace's members by name, built once: the scripts spell thousands of these tokens.
_VALUES: dict[str, dict[str, str]] = {
    **{space: {e.name: e.value for e in enum} for space, enum in NAMES.items()},
    "DIM": _DIMS,
}


def _name(m: re.Match[str]) -> str:
    space, member = m.group(1), m.group(2)
    values = _VALUES[space]
    if member not in values:
        raise ValueError(f"the Lua names {space}.{member}: no such member")
    return f"'{values[member]}'"


def _file(part: str) -> str:
    """A Lua file, the run's record's names (``NEW.*``: shared.calls.submission) rendered."""
    return bind_new_run((LUA_DIR / f"{part}.lua").read_text(), part)


def _body(name: str, part: str) -> str:
    """A script's own file with its declared call's slots (``ARG.*``, ``KEY.*``, ``V.*``: shared.calls)
    rendered to their positions, after the call's header generated from its declaration."""
    call = CALLS.get(name)
    body = bind(call, _file(part), name)
    return body if call is None else f"{call.header()}\n{body}"


def _enter(part: str) -> str:
    """The call of a shared file's per-call start (``enter_<file>``), if it has one."""
    return f"enter_{part}(KEYS, ARGV)\n" if f"local function enter_{part}(" in _file(part) else ""


@functools.cache
def source(name: str) -> str:
    """A script's source as written (as run by EVALSHA), its tokens not filled in yet: its shared
    files, the calls of their ``enter_<file>``, its body."""
    *shared, body = SCRIPTS[name]
    return "".join(map(_file, shared)) + "".join(map(_enter, shared)) + _body(name, body)


_VERSION = "__LIBRARY_VERSION__"


@functools.cache
def library_source() -> str:
    """The function library's source (tokens not filled in, its version a placeholder): each shared
    file once, in order of first use, then one function per script (``<name>_<version>``), the
    calls of its shared files' ``enter_<file>`` then its body."""
    shared: list[str] = []
    for parts in SCRIPTS.values():
        shared += [p for p in parts[:-1] if p not in shared]
    out = [f"#!lua name={functions.LIBRARY_PREFIX}{_VERSION}\n", *map(_file, shared)]
    for name, (*uses, body) in SCRIPTS.items():
        out += [f"redis.register_function('{name}_{_VERSION}', function(KEYS, ARGV)\n",
                *map(_enter, uses), _body(name, body), "\nend)\n"]  # fmt: skip
    # the context tokens a process tells the library (shared.functions.FunctionScript.load)
    out.append(
        f"redis.register_function('contexts_{_VERSION}', function(KEYS, ARGV) return register_contexts(ARGV) end)\n"
    )
    return "".join(out)


@functools.cache
def library() -> Library:
    """The library, rendered; its version is a hash of its code."""
    code = render(library_source())
    version = hashlib.sha1(code.encode()).hexdigest()[:12]
    return Library(version, code.replace(_VERSION, version))


async def prepare_scripts(parts: Any, settings: Settings) -> bool:
    """Start-up of a process: choose Functions or EVALSHA (AGENTMILL_REDIS_FUNCTIONS) and, with
    Functions, load the library on every master of ``parts`` (a started Partitions, or a client)
    that lacks it."""
    clients = parts.topology.clients() if hasattr(parts, "topology") else [parts]
    return await functions.prepare(clients, settings.redis_functions, library())


def render(text_: str) -> str:
    """A script's text with the schema's constants filled in (the context's field names, the
    terminal statuses, the hash fields, statuses and the other names of ``NAMES``): code, not
    settings. A token naming no member raises ValueError."""
    tokens = {
        "__CONTEXT_FIELDS__": ", ".join(f"'{f}'" for f in (*keys.CONTEXT_FIELDS, *CONTEXT_EXTRA)),
        "__TERMINAL__": ", ".join(f"{s.value}=true" for s in sorted(TERMINAL)),
        "__DEFAULT_PRIORITY__": str(limits.DEFAULT_PRIORITY),
        "__LARGE_BYTES__": str(off_loop.LARGE_BYTES),
        "__MIN_PRIORITY__": str(limits.MIN_PRIORITY),
        "__MAX_PRIORITY__": str(limits.MAX_PRIORITY),
        "__WAKE_KEPT__": str(keys.WAKE_KEPT),
        "__NANO_USD__": str(NANO_USD),
        "__SESSION_CALLS_KEPT__": str(limits.SESSION_CALLS_KEPT),
        "__SESSION_RUNS_SHOWN__": str(limits.SESSION_RUNS_SHOWN),
        "__SESSION_LOOPS_KEPT__": str(limits.SESSION_LOOPS_KEPT),
        "__INBOX_KEPT__": str(keys.INBOX_KEPT),
        "__SCALE_ONE__": str(SCALE_ONE),
        "__CONTEXT_TOOLS__": ", ".join(f"['{t}']=true" for t in sorted(CONTEXT_TOOLS)),
        "__LISTING_FIELDS__": ", ".join(f"'{f}'" for f in listing_row.hash_fields()),
    }
    for token, value in tokens.items():
        text_ = text_.replace(token, value)
    return _NAME_TOKEN.sub(_name, text_)


@functools.cache
def _rendered() -> dict[str, str]:
    return {name: render(source(name)) for name in SCRIPTS}


def warm() -> None:
    """Render every script and build the library now: about 150 ms of CPU, once a process. A worker
    calls it before its event loop holds runs (the first ``Scripts`` built on the loop blocked it
    for that long: figure 4's loop lag)."""
    _rendered()
    library()
