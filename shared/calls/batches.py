"""Calls on a batch: a batch request's end (producer/batch_shares.py), its share on each partition
closed; a retry taking its original's place in its batch (producer/original.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from shared.calls.base import KEY_ONLY, ScriptCall
from shared.keys import Partition

__all__ = ["BatchClose", "BatchCloseVerdict", "BatchReplace", "BatchReplaceVerdict"]


class BatchCloseVerdict(StrEnum):
    MISSING = "missing"  # the batch has no share on the partition
    FINISHED = "finished"  # its runs there have all ended: finished now (or before)
    CLOSED = "closed"  # no part still to come; it finishes when its runs there have ended


@dataclass(frozen=True, slots=True)
class BatchClose(ScriptCall):
    """batch_close.lua: the end of a batch request that did not say more: no part is still to come."""

    SCRIPT = "batch_close"
    KEY_NAMES = ("batch",)
    VERDICT = BatchCloseVerdict

    tenant: str = field(metadata=KEY_ONLY)
    batch_id: str = field(metadata=KEY_ONLY)

    def keys(self, part: Partition) -> list[str]:
        return [part.batch(self.tenant, self.batch_id)]


class BatchReplaceVerdict(StrEnum):
    LEFT = "left"
    NONE = "none"  # not in a batch, or it left already, or the batch's hash is gone


@dataclass(frozen=True, slots=True)
class BatchReplace(ScriptCall):
    """batch_replace.lua: a retry takes this run's place in its batch. A run Redis no longer holds
    comes with its tenant, batch and status (the archive's)."""

    SCRIPT = "batch_replace"
    KEY_NAMES = ("run",)
    VERDICT = BatchReplaceVerdict

    run_id: str
    retry_id: str  # as its client knows it
    tenant: str = ""
    batch_id: str = ""
    status: str = ""

    def keys(self, part: Partition) -> list[str]:
        return [part.run(self.run_id)]
