"""Every Redis key agentmill touches, built in one place: the schema.

Runs live in a fixed number of partitions (``AGENTMILL_PARTITIONS``, chosen at deploy time). A
partition is one Redis Cluster hash tag, so every key of its runs - run hash, stream, tool records,
its sessions' keys, its arq queue and job keys, and the live, awaiting, worker and webhook indexes
- shares one slot, and every script touches one slot only. On a single Redis all partitions live on
the one node, exactly as on a cluster; one partition there is the default.

A schedule lives at its key's home: its hash, its entry in the tenant's schedule index and in the
tenant's due set there, with the tenant in the partition's set of tenants with schedules due (one
slot, so its scripts touch one slot); the firers claim from every partition, a share per tenant.

A run's partition is its session's, else its run id's home (``Layout.home``, a hash of the id). A
run in a session whose home is another partition leaves a pointer at its home (``pointer``), so a
run id alone always finds its run.

Lua never composes a key format of its own: a script gets the keys it knows up front in KEYS, and
for the keys that depend on what it reads (the next run of a session, the runs a listing returns)
the partition's prefixes in ``Partition.context`` (the last ARGV of every script, parsed by
shared/lua/prelude.lua), where a key is a prefix followed by an id. Compound keys (a tenant's
listing index, a batch) join their parts with ``:`` in both languages; a test compares them.

``Partition`` declares a run's own keys and the partition's fixed ones here; a session's keys
(shared/session_keys.py), the listing and counting keys (shared/index_keys.py), a schedule's keys
(shared/schedule_keys.py) and a worker's (shared/worker_keys.py) are declared in its bases, each key
once.
"""

from __future__ import annotations

import zlib
from functools import cached_property

from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix
from redis.crc import key_slot

from shared.index_keys import IndexKeys
from shared.schedule_keys import ScheduleKeys
from shared.session_keys import SessionKeys
from shared.worker_keys import WorkerKeys

__all__ = [
    "CONTEXT_FIELDS",
    "INBOX_KEPT",
    "SCOPED_PREFIX",
    "SLOTS",
    "WAKE_KEPT",
    "Layout",
    "Partition",
    "conc_home",
    "conc_suffix",
    "debounce_home",
    "parse_job_id",
    "partition_tag",
    "rate_home",
    "slot_of",
]

PREFIX = "am"
SLOTS = 16384  # Redis Cluster's hash slots
SEP = "\x1f"  # between the fields of Partition.context (ids, tenants and JSON never hold it)
# The ids a named tenant's runs and sessions are kept under start so (producer.scope.Scope); no
# client id does, and no view shows one: a view names a run by the id its tenant knows.
SCOPED_PREFIX = "tsc_"


# How many wake signals a partition's wake list keeps (and one script call writes at most): a burst
# of jobs made due at once wakes up to this many waiting workers; the others' polls find the rest.
WAKE_KEPT = 8

# How many abort requests a worker's inbox keeps (the oldest go first): its beat reads them all.
INBOX_KEPT = 10_000

# The order of Partition.context's fields; prelude.lua reads them by these names. Only what a script
# needs for keys that depend on what it reads: every field is a ``<field>_prefix`` of Partition but
# job_id (the tag) and archive (the key itself: every ending script may add to it). The partition's fixed keys (queue, live, …) go as KEYS (shared/scripts.py).
STAGED_TTL_MS = 60_000  # a staged retry's or fork's payloads (Partition.staged) left unclaimed
CONTEXT_FIELDS = (
    "run", "events", "tools", "session", "session_pending", "session_runs", "session_results", "session_calls",
    "worker_runs",
    "worker_inbox", "worker_lease", "tenant_running", "tenant_held", "index", "batch", "job_key", "job_id", "archive",
    "tenant_active", "usage", "transcript", "gone", "run_cached", "webhook", "job_result", "job_progress",
    "conc_running", "conc_waiting", "debounce",
)  # fmt: skip


def conc_suffix(tenant: str, key: str) -> str:
    """What follows a concurrency key's prefixes: the tenant's length (UTF-8 bytes), the tenant and the
    key, so that no two (tenant, key) pairs meet whatever they hold (prelude.lua conc_suffix spells it the same)."""
    return f"{len(tenant.encode())}:{tenant}:{key}"


def conc_home(key: str) -> str:
    """The id a concurrency key's partition is the home of (Layout.home): its runs live there."""
    return f"conc:{key}"


def rate_home(key: str) -> str:
    """The id a rate key's partition is the home of (Layout.home): its starts are counted there."""
    return f"rate:{key}"


def debounce_home(key: str) -> str:
    """The id a debounce key's partition is the home of (Layout.home): its runs live there."""
    return f"debounce:{key}"


def slot_of(key_or_tag: str) -> int:
    """The cluster slot of a key (of its ``{tag}`` when it has one)."""
    return int(key_slot(key_or_tag.encode()))


def partition_tag(index: int, count: int) -> str:
    """Partition ``index`` of ``count``'s hash tag (braces included): the first of ``i``, ``i.0``,
    ``i.1`` … whose slot lies in the index-th of ``count`` equal slot ranges, so a cluster whose
    masters own equal ranges (what ``redis-cli --cluster create`` makes) gets equal shares."""
    lo, hi = index * SLOTS // count, (index + 1) * SLOTS // count
    candidate, k = str(index), 0
    while not lo <= slot_of(candidate) < hi:
        candidate, k = f"{index}.{k}", k + 1
    return "{" + candidate + "}"


class Partition(SessionKeys, IndexKeys, ScheduleKeys, WorkerKeys):
    """The keys of one partition. Per-id keys are a prefix followed by the id; a session's keys,
    the listing and counting keys, a schedule's keys and a worker's are declared in the modules of
    their bases."""

    def __init__(self, index: int, count: int) -> None:
        self.index = index
        self.count = count  # the layout's partitions
        self.tag = partition_tag(index, count)
        self.slot = slot_of(self.tag)
        b = self.base = f"{PREFIX}:{self.tag}:"
        self._session_prefixes(b)
        self._index_prefixes(b)
        self._schedule_prefixes(b)
        self._worker_prefixes(b)
        self.run_prefix = b + "run:"  # hash: shared.fields.RunField
        self.events_prefix = b + "events:"  # stream of RunEvents; entry id <seq>-0
        self.tools_prefix = b + "tools:"  # hash toolCallId -> {state, epoch, attempts, result}
        # string: the transcript's messages as JSON, comma-joined, when checkpoints leave it out
        # (AGENTMILL_CHECKPOINT_TRANSCRIPT=apart): appended by each commit (commit.lua)
        self.transcript_prefix = b + "transcript:"
        # a run's large payloads, staged (script_sending.run_staged): a fork's input and origin, a transcript
        self.staged_prefix = b + "staged:"
        self.webhook_prefix = b + "webhook:"  # hash: a run's (or batch's) webhook delivery state
        # string: a deleted run's tombstone (JSON: runId, tenant, deletedAt, actor), expiring after
        # AGENTMILL_TOMBSTONE_RETENTION_S: no script creates the run again while it is there
        self.gone_prefix = b + "gone:"
        self.run_cached_prefix = b + "tc.of:"  # set: the tool-result cache keys a run wrote (tool_cache)
        # + tenant:id: hash (shared.fields.DeletionField), a deletion by metadata, at its tenant's home
        self.deletion_prefix = b + "del:"
        self.pointer_prefix = b + "at:"  # string: partition index of a run living away from home
        self.tenant_active_prefix = b + "t.active:"  # zset runId -> submitted at: maxActive
        # hash: one root run's tree of sub-agents: childRunId -> its parent, '#' + parentId -> that
        # run's children, '*' -> the tree's runs (tree_admit.lua: maxChildren, maxDescendants)
        self.tree_prefix = b + "tree:"
        self.tenant_running_prefix = b + "t.running:"  # zset runId -> claimed at: maxRunning
        # zset job id -> its queue score: the tenant's due jobs its running cap holds back, in their
        # queue order; one goes back to the queue, with its score, each time a run of it stops running
        self.tenant_held_prefix = b + "t.held:"
        # Concurrency keys (RunInput.concurrency), per tenant and key (conc_suffix), on the partition the
        # key calls home (every run of a key lives there): zset runId -> since when it holds one of the
        # key's slots (from its release to the queue until it ends); zset runId -> its queue score,
        # the runs waiting for a slot, in the order they get one
        self.conc_running_prefix = b + "c.run:"
        self.conc_waiting_prefix = b + "c.wait:"
        # Debounce keys (RunInput.debounce), per tenant and key (conc_suffix), at the key's home:
        # string, the run waiting to start that a later submission of the key replaces
        self.debounce_prefix = b + "d:"
        self.tool_cache_prefix = (
            b + "tc:"
        )  # + tenant:tool:digest (tool_cache); string: a ToolResult, with a TTL
        self.job_key_prefix = job_key_prefix  # arq's; the job id carries the tag (job_id)
        self.job_result_prefix = (
            result_key_prefix  # arq's: a finished job's result (a run's deletion drops it)
        )
        self.job_progress_prefix = in_progress_key_prefix  # arq's: a job being run
        self.queue = f"arq:queue:{self.tag}"  # arq's sorted set of this partition's pending job ids
        self.live = b + "live"  # zset runId -> when the reconciler should next look at it (ms)
        self.awaiting = b + "awaiting"  # zset runId -> since when it waits for a human decision
        self.webhooks = b + "webhooks"  # list of deliveries (runIds, batch ids) to make
        self.webhooks_due = b + "webhooks:due"  # zset delivery id -> next attempt (ms)
        # With the archive on (AGENTMILL_ARCHIVE_URL): the finished runs still to archive, runId -> when
        # an archiver may take it (its ending, or the expiry of an archiver's claim; ms, Redis time).
        self.archive = b + "archive"
        # zset (partition 0) tenant -> until when (ms, Redis time) an API process's tokens name it
        self.live_tenants = b + "tenants.live.until"
        self.live_tenants_before = b + "tenants.live"  # the set older versions kept: removed
        self.scheduled = (
            b + "scheduled"
        )  # zset job id -> runAt (ms): jobs not due yet (claim_jobs.lua moves them)
        self.depth = b + "depth"  # hash priority -> jobs queued (in the queue or held back) of that priority
        # list: one entry each time a script makes a job due or schedules one here (bounded to
        # WAKE_KEPT); a worker with nothing to do waits on it (BLPOP) instead of its next poll
        self.wake = b + "wake"
        # Managed API keys (shared/api_keys.py): a key's hash (shared.fields.ApiKeyField) at its key
        # id's home; a tenant's keys (zset key id -> createdAt ms) and its audit log (a stream trimmed
        # with MAXLEN ~, shared.fields.AuditField; producer/audit.py) at the tenant's home.
        self.api_key_prefix = b + "apikey:"
        self.api_keys_prefix = b + "apikeys:"
        self.audit_prefix = b + "audit:"
        # With the archive on: the tenants with an audit log (a set, on partition 0) and, at each
        # tenant's home, the id of its last entry copied to the archive (shared/archive/audit_copy.py)
        self.audit_tenants = b + "audit.tenants"
        self.audit_copied_prefix = b + "audit.copied:"
        # zset deletion key -> when a deleter may take its next step (ms; a claim's expiry while held)
        self.deletions = b + "deletions"
        # zset {"key": run key, "tenant": …} (JSON) -> when to try again (ms): deleted runs whose archive
        # rows were locked when they were deleted (an archiver's open write); the deleters delete them
        self.archive_erasures = b + "archive.erase"

    def __repr__(self) -> str:
        return f"Partition({self.index}, {self.tag})"

    def run(self, run_id: str) -> str:
        return self.run_prefix + run_id

    def events(self, run_id: str) -> str:
        return self.events_prefix + run_id

    def tools(self, run_id: str) -> str:
        return self.tools_prefix + run_id

    def transcript(self, run_id: str) -> str:
        return self.transcript_prefix + run_id

    def staged(self, run_id: str, token: str) -> str:  # token: its request's
        return f"{self.staged_prefix}{run_id}:{token}"

    def webhook(self, delivery_id: str) -> str:
        return self.webhook_prefix + delivery_id

    def pointer(self, run_id: str) -> str:
        return self.pointer_prefix + run_id

    def gone(self, run_id: str) -> str:
        return self.gone_prefix + run_id

    def run_cached(self, run_id: str) -> str:
        return self.run_cached_prefix + run_id

    def deletion(self, tenant: str, deletion_id: str) -> str:
        return f"{self.deletion_prefix}{tenant}:{deletion_id}"

    def tool_cache(self, tenant: str, tool: str, digest: str) -> str:
        """A cached tool result: the tool's name and a digest of its canonical arguments, per tenant."""
        return f"{self.tool_cache_prefix}{tenant}:{tool}:{digest}"

    def api_key(self, key_id: str) -> str:
        """Hash: one managed API key (its keyed hash, never the key; shared.fields.ApiKeyField)."""
        return self.api_key_prefix + key_id

    def api_keys(self, tenant: str) -> str:
        """Zset key id -> createdAt (ms): a tenant's managed API keys (at the tenant's home)."""
        return self.api_keys_prefix + tenant

    def audit(self, tenant: str) -> str:
        """Stream: a tenant's audit log (at the tenant's home), shared.fields.AuditField per entry."""
        return self.audit_prefix + tenant

    def audit_copied(self, tenant: str) -> str:
        """String: the id of the last entry of the tenant's audit log copied to the archive."""
        return self.audit_copied_prefix + tenant

    def tenant_active(self, tenant: str) -> str:
        return self.tenant_active_prefix + tenant

    def tree(self, root_id: str) -> str:
        return self.tree_prefix + root_id

    def tenant_running(self, tenant: str) -> str:
        return self.tenant_running_prefix + tenant

    def tenant_held(self, tenant: str) -> str:
        return self.tenant_held_prefix + tenant

    def conc_running(self, tenant: str, key: str) -> str:
        return self.conc_running_prefix + conc_suffix(tenant, key)

    def conc_waiting(self, tenant: str, key: str) -> str:
        return self.conc_waiting_prefix + conc_suffix(tenant, key)

    def idempotency(self, key_run_id: str) -> str:
        """String: the run an Idempotency-Key names within its window (AGENTMILL_IDEMPOTENCY_TTL_S;
        idempotency_claim.lua), at the home of the id the key names without one (``key_run_id``)."""
        return f"{self.base}idem:{key_run_id}"

    def rate_key(self, tenant: str, key: str) -> str:
        """Zset runId -> the start it was given (ms): a rate key's starts (RunInput.rate; at the key's
        home, keys.rate_home; rate_slots.lua), within its period and ahead."""
        return f"{self.base}r:{conc_suffix(tenant, key)}"

    def debounce(self, tenant: str, key: str) -> str:
        return self.debounce_prefix + conc_suffix(tenant, key)

    def tenant_rate(self, tenant: str) -> str:
        """Hash (tokens, at): the tenant's submission token bucket (at its home partition; admit_rate.lua)."""
        return f"{self.base}t.rate:{tenant}"

    def tenant_budget(self, tenant: str, day: str) -> str:
        """Hash (shared.fields.BudgetField): the tenant's spend and holds of one UTC day (``day``:
        YYYY-MM-DD), at the tenant's home partition, so one slot per tenant: every reservation and
        settlement is one script on it (budget_reserve.lua, budget_settle.lua)."""
        return f"{self.base}t.budget:{tenant}:{day}"

    def tenant_budget_holds(self, tenant: str, day: str) -> str:
        """Zset ``holdId|tokens|cost`` -> expiry (ms, Redis time): the calls in flight holding part of
        that day's budget; an expired hold (its worker died before settling) is released."""
        return f"{self.base}t.holds:{tenant}:{day}"

    def agents(self, tenant: str) -> str:
        """Hash agent name -> its pointers as JSON (current, ramp, latest, versions' times, deleted):
        the agents a tenant keeps through the API (producer/agents.py), at the tenant's home partition."""
        return f"{self.base}agents:{tenant}"

    def agent_versions(self, tenant: str) -> str:
        """Hash ``<name>@<n>`` -> that version's profile as the tenant gave it (JSON), immutable: what
        a worker reads for a run pinned to it (worker/adapters/agent_cache.py), beside ``agents``."""
        return f"{self.base}agents.v:{tenant}"

    def job_id(self, run_id: str, gen: int) -> str:
        """arq job id of a run's dispatch ``gen``: the tag, the run id, and ``#gen`` past the first."""
        return f"{self.tag}{run_id}" if gen <= 1 else f"{self.tag}{run_id}#{gen}"

    def job_key(self, job: str) -> str:
        return job_key_prefix + job

    def in_progress_key(self, job: str) -> str:
        return in_progress_key_prefix + job

    def run_keys(self, run_id: str) -> list[str]:
        """run, stream, tools: the keys of one run a run script takes first (commit.lua takes the run's
        alone and builds the other two, and the lease's, from the ids it is sent)."""
        return [self.run_prefix + run_id, self.events_prefix + run_id, self.tools_prefix + run_id]

    @cached_property
    def context(self) -> str:
        """The prefixes and fixed keys a script may need for keys that depend on what it reads
        (CONTEXT_FIELDS order): the last ARGV of every script."""
        return (
            SEP.join(
                self.tag
                if f == "job_id"
                else self.archive
                if f == "archive"
                else getattr(self, f + "_prefix")
                for f in CONTEXT_FIELDS
            )
            + SEP
        )


class Layout:
    """``count`` partitions, and which one an id calls home."""

    def __init__(self, count: int = 1) -> None:
        if not 1 <= count <= 1024:
            raise ValueError("AGENTMILL_PARTITIONS must be between 1 and 1024")
        self.count = count
        self.parts = tuple(Partition(i, count) for i in range(count))
        self._by_tag = {p.tag: p for p in self.parts}

    def __repr__(self) -> str:
        return f"Layout({self.count})"

    def home(self, some_id: str) -> Partition:
        """The partition an id (run, session, tenant, batch) hashes to."""
        if self.count == 1:
            return self.parts[0]
        return self.parts[zlib.crc32(some_id.encode()) % self.count]

    def of_job(self, job: str) -> tuple[Partition, str, int]:
        """(partition, run id, dispatch number) of a job id written by ``Partition.job_id``."""
        end = job.index("}") + 1
        run_id, gen = parse_job_id(job[end:])
        return self._by_tag[job[:end]], run_id, gen

    def of_key(self, key: str) -> Partition:
        """The partition of a key this schema built (its ``{tag}``)."""
        start = key.index("{")
        return self._by_tag[key[start : key.index("}", start) + 1]]


def parse_job_id(job: str) -> tuple[str, int]:
    """(run id, dispatch number) of a job id without its tag (run ids have no ``#``)."""
    run_id, sep, gen = job.rpartition("#")
    if sep and gen.isdigit():
        return run_id, int(gen)
    return job, 1
