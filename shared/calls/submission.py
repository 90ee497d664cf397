"""Calls that create a run: ``Submit``, whose fields are also the per-run record every creating
script hands submit_one.lua (``SubmitMany``, ``SubmitRestored``, ``SpawnChild``), and ``AdmitSubmit``
(one run admitted with its tenant's quotas and created in one call). The admissions asked before a
run is created are shared.calls.admissions'.

submit_one.lua is shared code, not a script body: it reads the run's record as ``A`` and its keys as
``K``, by name (``A[NEW.<FIELD>]``, ``NEWN.META``: where the metadata terms start, ``NEWK.<KEY>``:
``K[i]``, ``V.<VERDICT>``), rendered by ``bind_new_run``."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = [
    "AdmitSubmit",
    "SpawnChild",
    "Submit",
    "SubmitMany",
    "SubmitRestored",
    "SubmitVerdict",
    "bind_new_run",
]


class SubmitVerdict(StrEnum):
    """What every call that creates a run answers (submit_one.lua's verdicts), and the admissions'
    refusals of the calls that admit it too (spawn_child, admit_submit): one list, so a new verdict
    reaches them all."""

    CREATED = "created"  # its status second
    EXISTS = "exists"  # the same input under that id: its status second
    CONFLICT = "conflict"  # another input (or another tenant's run) under that id
    DELETED = "deleted"  # the id's run was deleted: not made again while its tombstone lasts
    BATCH_FINISHED = "batch_finished"
    CONCURRENCY_FULL = "concurrency_full"  # its concurrency key holds the most runs waiting
    UNKNOWN_SESSION = "unknown_session"
    SESSION_BUSY = "session_busy"  # multitaskStrategy reject: the session's active run second
    # admit_submit only: the tenant's bucket, the ms until it holds a token second
    RATE_LIMITED = "rate_limited"
    # spawn_child, admit_submit: its tenant's maxActive, the runs counted here second
    QUOTA_EXCEEDED = "quota_exceeded"


@dataclass(frozen=True, slots=True)
class Submit(ScriptCall):
    """submit.lua: one run created (or answered for the one already there). Its fields are the run's
    record for submit_one.lua whichever script creates it ('' = none for each optional one)."""

    SCRIPT = "submit"
    # the run, its first dispatch's arq job, and its session's three (unused without a session)
    KEY_NAMES = ("run", "job", "session", "session_pending", "session_runs")
    VERDICT = SubmitVerdict

    run_id: str
    input: bytes | str  # the stored (sealed) RunInput JSON; '' in a SubmitMany record (its rest holds it)
    input_hash: str
    tenant: str
    session_id: str = ""
    webhook: str = ""
    auto_create_session: str = ""  # '1' | ''
    multitask: str = "enqueue"  # enqueue | reject | interrupt
    batch_id: str = ""
    agent: str = ""
    client_id: str = ""  # the id the client knows the run by, when its tenant's key names it
    client_session: str = ""  # likewise its session
    item: str = ""  # its item index in its batch
    priority: str = ""  # '' = the default
    run_at: str = ""  # ms; one not ahead of now is due at once
    trace: str = ""  # F.TRACE: traceparent, a newline, tracestate
    conc_key: str = ""  # a run with one has no session
    conc_limit: str = ""
    debounce_key: str = ""  # a run with one has no session nor runAt: scheduled a period from now
    debounce_ms: str = ""
    waiting_for: str = ""  # F.WAITING_FOR: 'rate:<key>' when its rate key delayed its runAt
    agent_version: str = ""  # F.AGENT_VERSION: the tenant's agent version it is pinned to
    no_content: str = ""  # F.NO_CONTENT: '1' when its input's storeContent is false, else '0' ('' = unsaid)
    meta: tuple[str, ...] = ()  # the indexed metadata, 'key=value' terms

    def keys(self, part: Partition) -> list[str]:
        sid = self.session_id
        return [part.run(self.run_id), part.job_key(part.job_id(self.run_id, 1)), part.session(sid),
                part.session_pending(sid), part.session_runs(sid)]  # fmt: skip


_NEW = re.compile(r"\b(NEWN|NEWK|NEW)\.([A-Z][A-Z0-9_]*)\b")
_V = re.compile(r"\bV\.([A-Z][A-Z0-9_]*)\b")


def bind_new_run(text: str, file: str) -> str:
    """A Lua file with the run's record's (``Submit``'s) names rendered: ``NEW.<FIELD>`` as its index
    in ``A``, ``NEWN.META`` as where its metadata terms start, ``NEWK.<KEY>`` as ``K[i]``; in submit_one.lua
    (shared code, which no call binds) ``V.<VERDICT>`` as SubmitVerdict's values too."""
    table = {f"NEWK.{n.upper()}": f"K[{i}]" for i, n in enumerate(Submit.KEY_NAMES, 1)}
    for k, v in Submit.positions().items():
        space, _, name = k.partition(".")
        if space in ("ARG", "ARGN"):  # the slot's index in A (A[NEW.RUN_ID] is A[1])
            table[f"{'NEW' if space == 'ARG' else 'NEWN'}.{name}"] = v.removeprefix("ARGV[").removesuffix("]")

    def sub(m: re.Match[str]) -> str:
        if m.group(0) not in table:
            raise ValueError(f"{file}.lua names {m.group(0)}: the run's record declares no such slot")
        return table[m.group(0)]

    text = _NEW.sub(sub, text)
    if file == "submit_one":
        text = _V.sub(lambda m: f"'{SubmitVerdict[m.group(1)].value}'", text)
    return text


def _slots(cls: type[ScriptCall], args: dict[str, str]) -> dict[str, str]:
    """``args`` (the ARG/ARGN tokens) with the call's KEY and V tokens."""
    out = {f"KEY.{n.upper()}": f"KEYS[{i}]" for i, n in enumerate(cls.KEY_NAMES, 1)}
    return {**args, **out, **{f"V.{v.name}": f"'{v.value}'" for v in cls.VERDICT or ()}}


@dataclass(frozen=True, slots=True)
class SubmitMany(ScriptCall):
    """submit_many.lua: many runs of one tenant on one partition (the batch path); each run's record
    (``Submit.argv()`` with its input '') in one JSON array, the inputs after it. Reply: a verdict
    (SubmitVerdict) and a status per run."""

    SCRIPT = "submit_many"
    KEY_NAMES = ()  # the runs' keys come from the context
    VERDICT = SubmitVerdict

    tenant: str
    batch_id: str  # '' = none
    batch_webhook: str  # '' = none
    runs: bytes  # JSON: [record, …]
    inputs: tuple[bytes | str, ...]

    def keys(self, part: Partition) -> list[str]:
        return []

    @classmethod
    def of(cls, tenant: str, batch_id: str, batch_webhook: str, runs: list[Submit]) -> SubmitMany:
        records = orjson.dumps([dataclasses.replace(r, input="").argv() for r in runs])
        return cls(tenant, batch_id, batch_webhook, records, tuple(r.input for r in runs))


@dataclass(frozen=True, slots=True)
class SubmitRestored(ScriptCall):
    """submit_restored.lua: a retry or fork, created as submit_one does, with its lineage, its origin
    and the tool records copied from the run it continues (call id, record JSON, per record; the
    run's record after them). A large one's input and origin come staged (``staged``: written by
    plain commands just before, renamed into the run's hash). Reply: submit_one's."""

    SCRIPT = "submit_restored"
    KEY_NAMES = (*Submit.KEY_NAMES, "tools", "staged")
    VERDICT = SubmitVerdict

    lineage: bytes | str  # JSON
    origin: bytes | str  # JSON ('' = from its input, or staged)
    records: tuple[bytes | str | int, ...]
    run: Submit  # its input '' when staged
    staged: str = (
        ""  # the token of a staging hash (Partition.staged) holding its input and origin ('' = none)
    )

    def keys(self, part: Partition) -> list[str]:
        rid = self.run.run_id
        return [*self.run.keys(part), part.tools(rid), part.staged(rid, self.staged or "-")]

    def argv(self) -> list[Any]:
        flag = "1" if self.staged else ""
        return [self.lineage, self.origin, flag, len(self.records) // 2, *self.records, *self.run.argv()]

    @classmethod
    def positions(cls) -> dict[str, str]:
        args = {
            "ARG.LINEAGE": "ARGV[1]",
            "ARG.ORIGIN": "ARGV[2]",
            "ARG.STAGED": "ARGV[3]",
            "ARG.N_RECORDS": "ARGV[4]",
            "ARGN.RECORDS": "5",
        }
        return _slots(cls, args)


@dataclass(frozen=True, slots=True)
class SpawnChild(ScriptCall):
    """spawn_child.lua: a sub-agent call's child run on the child's partition: submit_one's run with
    its parent, the parent's tool call and ancestry; counted against its tenant's maxActive."""

    SCRIPT = "spawn_child"
    KEY_NAMES = (*Submit.KEY_NAMES, "tenant_active")
    VERDICT = SubmitVerdict

    parent_run_id: str
    parent_call_id: str
    ancestry: bytes | str  # JSON (config.Lineage)
    room: int | str  # maxActive for this partition ('' = none)
    active_ttl_ms: int
    grace_ms: int
    run: Submit

    def keys(self, part: Partition) -> list[str]:
        return [*self.run.keys(part), part.tenant_active(self.run.tenant)]

    def argv(self) -> list[Any]:
        return [*(getattr(self, f.name) for f in dataclasses.fields(self)[:-1]), *self.run.argv()]

    @classmethod
    def positions(cls) -> dict[str, str]:
        fs = dataclasses.fields(cls)
        args = {f"ARG.{f.name.upper()}": f"ARGV[{i}]" for i, f in enumerate(fs[:-1], 1)}
        return _slots(cls, {**args, "ARGN.RUN": str(len(fs))})


@dataclass(frozen=True, slots=True)
class AdmitSubmit(ScriptCall):
    """admit_submit.lua: one run on its partition, admitted by its tenant's submission rate (when
    the tenant's bucket lives there: ``per_second`` > 0) and maxActive (``room``), then created as
    submit_one does, in one call; counted against maxActive only once created. Its bucket and audit
    keys are the tenant's home's only when the partition is the tenant's home (else not touched)."""

    SCRIPT = "admit_submit"
    KEY_NAMES = (*Submit.KEY_NAMES, "tenant_active", "bucket", "audit")
    VERDICT = SubmitVerdict

    room: int | str  # maxActive for this partition ('' = none)
    active_ttl_ms: int
    grace_ms: int
    per_second: int  # the bucket's refill; 0: not taken here (another partition's, or none)
    burst: int
    audit: bytes | str  # the audit entry (JSON: [max entries, field, value, …]); '' = none
    run: Submit

    def keys(self, part: Partition) -> list[str]:
        t = self.run.tenant
        return [*self.run.keys(part), part.tenant_active(t), part.tenant_rate(t), part.audit(t)]

    def argv(self) -> list[Any]:
        return [*(getattr(self, f.name) for f in dataclasses.fields(self)[:-1]), *self.run.argv()]

    @classmethod
    def positions(cls) -> dict[str, str]:
        fs = dataclasses.fields(cls)
        args = {f"ARG.{f.name.upper()}": f"ARGV[{i}]" for i, f in enumerate(fs[:-1], 1)}
        return _slots(cls, {**args, "ARGN.RUN": str(len(fs))})
