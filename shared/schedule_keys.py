"""A schedule's keys (shared/keys.py's ``Partition`` has them; producer/schedules/): its hash, the
tenant's schedule listing and due set, the partition's tenants with schedules due, and the tenant's
firings this minute. A schedule lives at its key's home, its tenant's rate at the tenant's."""

from __future__ import annotations

__all__ = ["ScheduleKeys"]


class ScheduleKeys:
    """The schedule keys of one partition (declared by ``_schedule_prefixes``)."""

    def _schedule_prefixes(self, b: str) -> None:
        # Schedules (producer/schedules/) living here: those whose key calls this partition home.
        self.schedule_prefix = b + "sched:"  # hash: shared.fields.ScheduleField
        self.schedule_index_prefix = b + "sched.ix:"  # + tenant: zset schedule key -> createdAt (ms)
        # + tenant: zset schedule key -> next firing (ms), or its claim's expiry (its unpaused schedules)
        self.schedules_due_prefix = b + "sched.due:"
        self.schedules_due_tenants = b + "sched.due.t"  # zset tenant -> its earliest due score here
        self.schedules_due_before = b + "sched.due"  # one zset of every tenant's (older versions): moved
        self.schedule_rate_prefix = (
            b + "sched.rate:"
        )  # + tenant (at its home): hash of its firings this minute

    def schedule(self, schedule_key: str) -> str:
        return self.schedule_prefix + schedule_key

    def schedules_due(self, tenant: str) -> str:
        """A tenant's schedules due here (the firers claim from it)."""
        return self.schedules_due_prefix + tenant

    def schedule_rate(self, tenant: str) -> str:
        """A tenant's schedule firings this minute (at the tenant's home partition)."""
        return self.schedule_rate_prefix + tenant

    def schedule_index(self, tenant: str) -> str:
        """A tenant's schedules here (its listing)."""
        return self.schedule_index_prefix + tenant
