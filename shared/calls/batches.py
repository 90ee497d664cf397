"""A batch request's end (producer/batch_shares.py): its share on each partition closed."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from shared.calls.base import KEY_ONLY, ScriptCall
from shared.keys import Partition

__all__ = ["BatchClose", "BatchCloseVerdict"]


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
