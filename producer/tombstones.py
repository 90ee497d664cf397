"""Whether a run was deleted: its tombstone (producer/deletion.py) at its home partition. The archive
may still hold rows of a deleted run for a while (those a deletion found locked by an archiver's
write, left to the deleters): a read of the archive checks this first."""

from __future__ import annotations

from shared.script_sending import Parts

__all__ = ["tombstoned"]


async def tombstoned(parts: Parts, key: str) -> bool:
    """Has the run kept under ``key`` a tombstone?"""
    home = parts.home(key)
    return bool(await parts.call(home, lambda c: c.exists(home.gone(key))))
