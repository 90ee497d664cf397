"""Script calls declared once: one frozen dataclass per script (``shared.calls.base.ScriptCall``),
whose fields in order ARE the script's arguments after the partition's context. The Lua reads them
by name (``ARG.RUN_ID``), rendered to their positions when the library is built
(``shared.scripts.render``): nothing costs more at run time, and Python and Lua cannot disagree on a
slot. A reply's verdicts are an enum the Lua spells ``V.<NAME>`` and Python compares against.

``CALLS``: script name -> its call class, for the scripts declared so far; ``POSITIONAL``: the scripts
whose Lua still reads ``ARGV[n]`` by number (tests/unit/test_script_calls.py: the list only shrinks)."""

from __future__ import annotations

from shared.calls.agents import AgentCreate, AgentPoint
from shared.calls.approvals import SettleApproval, SettleApprovalVerdict
from shared.calls.base import ScriptCall
from shared.calls.batches import BatchClose
from shared.calls.budgets import BudgetReserve, BudgetSettle
from shared.calls.claims import ArchiveClaim, DeletionClaim
from shared.calls.dispatch import ClaimJobs, Redispatch, Scaling
from shared.calls.economy import EconAdvance, EconClose, EconDone, EconEnqueue, EconLease
from shared.calls.erasure import ArchiveDone, DeleteRun
from shared.calls.limits import CapacityAcquire, CapacityPause, CapacityRelease, CapacityRenew, RateSlots
from shared.calls.listing import ListRuns
from shared.calls.results import BatchResults, ChildResult, ClaimWebhooks, ToolResults
from shared.calls.runs import Abort, AbortVerdict, Release, ReleaseVerdict
from shared.calls.schedules import (
    SayLiveTenants,
    ScheduleAdvance,
    ScheduleClaim,
    ScheduleCreate,
    ScheduleDelete,
    ScheduleDeleteVerdict,
    SchedulePause,
    SchedulePauseVerdict,
    ScheduleRate,
)
from shared.calls.steps import (
    Acquire,
    AcquireVerdict,
    AppendVerdict,
    Beat,
    BeatVerdict,
    Commit,
    ModelReply,
    ModelReplyVerdict,
    Publish,
    ToolCachePut,
)
from shared.calls.submission import (
    AdmitRate,
    AdmitTenant,
    BatchReplace,
    IdempotencyClaim,
    SpawnChild,
    Submit,
    SubmitMany,
    SubmitRestored,
    SubmitVerdict,
    TreeAdmit,
)
from shared.calls.workers import ForgetWorker, ForgetWorkerVerdict

__all__ = [
    "CALLS",
    "Abort",
    "AbortVerdict",
    "Acquire",
    "AcquireVerdict",
    "AppendVerdict",
    "Beat",
    "BeatVerdict",
    "Commit",
    "EconAdvance",
    "EconClose",
    "EconDone",
    "EconEnqueue",
    "EconLease",
    "ForgetWorker",
    "ForgetWorkerVerdict",
    "ModelReply",
    "ModelReplyVerdict",
    "Publish",
    "Release",
    "ReleaseVerdict",
    "SayLiveTenants",
    "ScheduleCreate",
    "ScheduleDelete",
    "ScheduleDeleteVerdict",
    "SchedulePause",
    "SchedulePauseVerdict",
    "ScheduleRate",
    "ScriptCall",
    "SettleApproval",
    "SettleApprovalVerdict",
    "Submit",
    "SubmitVerdict",
    "ToolCachePut",
]

CALLS: dict[str, type[ScriptCall]] = {
    c.SCRIPT: c
    for c in (
        Abort,
        Release,
        ScheduleDelete,
        SchedulePause,
        ForgetWorker,
        SayLiveTenants,
        ChildResult,
        ToolResults,
        ClaimWebhooks,
        BatchResults,
        AgentCreate,
        AgentPoint,
        ScheduleCreate,
        ScheduleRate,
        ArchiveClaim,
        DeletionClaim,
        Submit,
        SubmitMany,
        SubmitRestored,
        SpawnChild,
        TreeAdmit,
        AdmitTenant,
        AdmitRate,
        IdempotencyClaim,
        BatchReplace,
        SettleApproval,
        Acquire,
        Commit,
        Publish,
        Beat,
        ToolCachePut,
        ModelReply,
        EconEnqueue,
        EconLease,
        EconClose,
        EconAdvance,
        EconDone,
        CapacityAcquire,
        CapacityRelease,
        CapacityRenew,
        CapacityPause,
        RateSlots,
        BudgetReserve,
        BudgetSettle,
        ScheduleClaim,
        ScheduleAdvance,
        ArchiveDone,
        DeleteRun,
        Redispatch,
        ClaimJobs,
        ListRuns,
        BatchClose,
        Scaling,
    )
}
