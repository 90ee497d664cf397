"""A batch counted from its archived runs (producer.archived.ArchiveReads.batch) shows as the batch
hash of Redis would, had it counted the same runs (producer.listing.batch_view): no PostgreSQL, the
store's rows given."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from producer.archived import ArchiveReads
from producer.batch_shares import merge_batch
from producer.listing import batch_view
from shared.archive.store import ArchiveStore


class Rows(ArchiveStore):
    """The rows of shared.archive.groups' batch query, as asyncpg answers them."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__("postgresql://unused")
        self.rows = rows

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        return self.rows


def _row(
    status: str,
    runs: int,
    created: int,
    finished: int,
    cost: Decimal | None,
    estimated: int = 0,
    economy: int = 0,
) -> dict[str, Any]:
    """``economy``: of the ``runs``, how many ran in the economy lane (4 input, 1 output token, 20
    nano-USD, 2 cache read tokens each)."""
    return {"status": status, "runs": runs, "first_created": created, "last_finished": finished,
            "input_tokens": 10 * runs, "output_tokens": 3 * runs, "estimated": estimated, "cost": cost,
            "cache_read_tokens": 6 * runs, "cache_write_tokens": 2 * runs,
            "e_in": 4 * economy, "e_out": economy, "e_cost": 20 * economy, "e_cr": 2 * economy, "e_cw": 0}  # fmt: skip


async def test_the_archived_runs_counted_read_as_the_batch_hash_they_would_make() -> None:
    reads = ArchiveReads(Rows([_row("completed", 7, 1000, 5000, Decimal("0.000123456"), 2, economy=3),
                               _row("failed", 2, 900, 6000, None)]))  # fmt: skip
    h = await reads.batch("tenant-a", "b1")
    assert h is not None
    # the same runs counted by Redis's scripts on two partitions' shares
    redis = merge_batch([
        {"batchId": "b1", "tenant": "tenant-a", "createdAt": "900", "finishedAt": "6000", "total": "5", "done": "5",
         "completed": "3", "failed": "2", "inputTokens": "50", "outputTokens": "15", "costUsd": "0.0000529",
         "estimatedRuns": "1", "cacheReadTokens": "30", "cacheWriteTokens": "10", "economyInputTokens": "4",
         "economyOutputTokens": "1", "economyCostNanoUsd": "20", "economyCacheReadTokens": "2"},
        {"batchId": "b1", "tenant": "tenant-a", "createdAt": "1000", "finishedAt": "5000", "total": "4", "done": "4",
         "completed": "4", "inputTokens": "40", "outputTokens": "12", "costUsd": "0.000070556", "estimatedRuns": "1",
         "cacheReadTokens": "24", "cacheWriteTokens": "8", "economyInputTokens": "8", "economyOutputTokens": "2",
         "economyCostNanoUsd": "40", "economyCacheReadTokens": "4", "economyCacheWriteTokens": "0"},
    ])  # fmt: skip
    assert redis is not None
    assert batch_view(h) == batch_view(redis)
    view = batch_view(h)
    assert (view["total"], view["done"], view["finished"], view["finishedAt"]) == (9, 9, True, 6000)
    assert view["usage"] == {"inputTokens": 90, "outputTokens": 27, "estimated": True, "costUsd": 0.000123456,
                             "cacheReadTokens": 54, "cacheWriteTokens": 18, "lanes": {
        "standard": {"inputTokens": 78, "outputTokens": 24, "costUsd": 0.000123396, "cacheReadTokens": 48,
                     "cacheWriteTokens": 18},
        "economy": {"inputTokens": 12, "outputTokens": 3, "costUsd": 6e-08, "cacheReadTokens": 6,
                    "cacheWriteTokens": 0}}}  # fmt: skip


async def test_no_archived_run_is_no_batch_and_no_price_is_no_cost() -> None:
    assert await ArchiveReads(Rows([])).batch("tenant-a", "b1") is None
    h = await ArchiveReads(Rows([_row("aborted", 1, 5, 6, None)])).batch("tenant-a", "b1")
    assert h is not None
    assert batch_view(h)["usage"] == {
        "inputTokens": 10,
        "outputTokens": 3,
        "estimated": False,
        "costUsd": None,
        "cacheReadTokens": 6,
        "cacheWriteTokens": 2,
        "lanes": {
            "standard": {
                "inputTokens": 10,
                "outputTokens": 3,
                "costUsd": None,
                "cacheReadTokens": 6,
                "cacheWriteTokens": 2,
            },
            "economy": {
                "inputTokens": 0,
                "outputTokens": 0,
                "costUsd": None,
                "cacheReadTokens": 0,
                "cacheWriteTokens": 0,
            },
        },
    }
    assert batch_view(h)["counts"]["aborted"] == 1
