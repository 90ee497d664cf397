"""Calls of one run's scripts from outside its worker, and the worker's hand-back."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from shared.calls.base import TAIL, ScriptCall
from shared.keys import Partition

__all__ = ["Abort", "AbortVerdict", "Release", "ReleaseVerdict"]


class AbortVerdict(StrEnum):
    UNKNOWN = "unknown"  # no such run (or another tenant's)
    FINISHED = "finished"  # it had ended: its status second
    ABORTED = "aborted"  # queued, scheduled or parked: ended now (its status before second)
    REQUESTED = "requested"  # running: its worker stops it (its status second)


@dataclass(frozen=True, slots=True)
class Abort(ScriptCall):
    """abort.lua: end a run that holds no worker now, else ask its worker to stop it."""

    SCRIPT = "abort"
    KEY_NAMES = ("run", "stream", "tools")
    VERDICT = AbortVerdict

    run_id: str
    reason: str
    tenant: str = ""  # '' = any tenant's
    actor: str = ""  # who aborts: its JSON (shared.actors.actor_json), '' = none

    def keys(self, part: Partition) -> list[str]:
        return part.run_keys(self.run_id)


class ReleaseVerdict(StrEnum):
    FENCED = "fenced"  # another epoch holds the run
    TERMINAL = "terminal"  # it has ended
    RELEASED = "released"  # back on the queue
    POISON_RUN = "poison_run"  # a lost attempt too many (``lost_owner``): it ended failed


@dataclass(frozen=True, slots=True)
class Release(ScriptCall):
    """release.lua: the hand-back; the run goes straight back on the queue as dispatch ``new_gen``.
    Graceful: the worker stops at a checkpoint. With ``lost_owner`` (the lease id it ran under): the
    run stopped without writing on its worker's passed lease deadline; it goes back only while
    still running under that lease id at ``epoch``, counted as a lost attempt as the reconciler
    counts a lapsed lease's runs."""

    SCRIPT = "release"
    KEY_NAMES = ("run", "stream", "tools")
    VERDICT = ReleaseVerdict

    epoch: int
    run_id: str
    new_gen: int
    lost_owner: str = field(default="", metadata=TAIL)  # sent only when given

    def keys(self, part: Partition) -> list[str]:
        return part.run_keys(self.run_id)
