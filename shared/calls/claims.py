"""Leased claims of background work on a partition: the archiver's finished runs, a deleter's step."""

from __future__ import annotations

from dataclasses import dataclass

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = ["ArchiveClaim", "DeletionClaim"]


@dataclass(frozen=True, slots=True)
class ArchiveClaim(ScriptCall):
    """archive_claim.lua: up to ``limit`` finished runs of the partition's archive index that are due,
    each claimed for ``lease_ms``; answers the run ids, each followed by its claim (its new score)."""

    SCRIPT = "archive_claim"
    KEY_NAMES = ()  # the archive index is the context's

    limit: int
    lease_ms: int

    def keys(self, part: Partition) -> list[str]:
        return []


@dataclass(frozen=True, slots=True)
class DeletionClaim(ScriptCall):
    """deletion_claim.lua: the deletion by metadata due first on the partition, claimed for one step
    of ``claim_ms``; answers its key, or nothing."""

    SCRIPT = "deletion_claim"
    KEY_NAMES = ("deletions",)

    claim_ms: int

    def keys(self, part: Partition) -> list[str]:
        return [part.deletions]
