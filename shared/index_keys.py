"""The keys a partition keeps to list and count runs (shared/keys.py's ``Partition`` has them): a
tenant's listing indexes, its batches' counters, its usage by day, and the pool's runs by minute."""

from __future__ import annotations

__all__ = ["BATCH_DELIVERY", "INDEX_DIMS", "IndexKeys"]

# Listing indexes (per tenant and partition; bounded, expiring with the retention): sorted sets
# runId -> createdAt (ms). ``dim`` is one of these; the tenant-wide index is dim "all", value "".
# "item" (value: a batch id) is the batch's order instead: runId -> its item index in the batch.
# "parent" (value: the parent's run id, the one its keys use): a parent's child runs (sub-agents).
INDEX_DIMS = ("all", "status", "agent", "session", "batch", "meta", "item", "parent")

# A finished batch's delivery id on a partition's webhook list: this prefix, then the batch key (a
# runId never holds a brace, so the two kinds of delivery cannot be confused).
BATCH_DELIVERY = "{batch}"


class IndexKeys:
    """The listing and counting keys of one partition (prefixes declared by ``_index_prefixes``)."""

    def _index_prefixes(self, b: str) -> None:
        self.index_prefix = b + "ix:"  # + tenant:dim:value (index_key)
        self.usage_prefix = b + "usage:"  # + tenant:day (usage_day)
        self.pool_minute_prefix = b + "pool.min:"  # hash: runs started/ended in one minute (pool_minute)
        self.batch_prefix = b + "batch:"  # + tenant:batchId (batch_key); hash: shared.fields.BatchField

    def index_key(self, tenant: str, dim: str, value: str = "") -> str:
        return f"{self.index_prefix}{tenant}:{dim}:{value}"

    def batch(self, tenant: str, batch_id: str) -> str:
        """Hash: createdAt, total, done, one counter per status, open, finishedAt, webhook (this
        partition's share of the batch's runs)."""
        return f"{self.batch_prefix}{tenant}:{batch_id}"

    def batch_done(self, tenant: str, batch_id: str) -> str:
        """String set once when the whole batch finished (at its home partition): its webhook fires once."""
        return f"{self.batch_prefix}{tenant}:{batch_id}:done"

    def usage_day(self, tenant: str, day: str) -> str:
        """Hash ``<agent>|in|out|cost|runs`` -> totals (shared.fields.usage_field): the usage of the
        tenant's runs that ended on this partition on one UTC day (commit.lua, and prelude.lua's
        finalize for a run ended from outside its worker; GET /v1/usage sums the partitions)."""
        return f"{self.usage_prefix}{tenant}:{day}"

    def pool_minute(self, minute: int) -> str:
        """Runs the pool started and ended in one minute (epoch minutes), by field (shared.pool_stats)."""
        return self.pool_minute_prefix + str(minute)
