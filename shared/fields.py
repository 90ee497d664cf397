"""The fields of the hashes both Python and the Lua scripts read and write, named once: a run's
(keys.Partition.run, the source of truth of a run), a batch's share in a partition
(keys.Partition.batch), a session's (keys.Partition.session) and a schedule's
(keys.Partition.schedule).

The scripts spell them as tokens (``F.LAST_SEQ``, ``BATCH.DONE``, ``SESSION.ACTIVE_RUN``; statuses as
``S.QUEUED``) that shared.scripts.render fills in from these enums, so a field renamed here is renamed
in every script, and a token naming no field fails at render time instead of reading nil in Redis.
A StrEnum member is its value (it equals, hashes and encodes as it), so redis-py takes it as is.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "USAGE_PARTS",
    "ApiKeyField",
    "AuditField",
    "BatchField",
    "BudgetField",
    "DeletionField",
    "EconomyBatchField",
    "EconomyBatchState",
    "EconomyUsagePart",
    "RunField",
    "ScheduleField",
    "SessionField",
    "UsagePart",
    "usage_field",
]


class RunField(StrEnum):
    """The run hash. Written at submission (submit_one.lua) unless said otherwise."""

    STATUS = "status"  # agentmill_client.statuses.RunStatus; changed only by scripts, each calling track()
    TENANT = "tenant"
    CREATED_AT = "createdAt"  # ms, Redis time
    INPUT = "input"  # the RunInput JSON
    INPUT_HASH = "inputHash"  # what an idempotent resubmission must match
    SESSION_ID = "sessionId"  # '' = none
    AGENT = "agent"
    AGENT_VERSION = (
        "agentVersion"  # the version of a tenant's agent the run is pinned to (absent: a file profile)
    )
    BATCH = "batch"  # batch id, '' = none
    CLIENT_ID = "clientId"  # the id the client knows a tenant-scoped run by
    CLIENT_SESSION = "clientSession"  # likewise for its session
    WEBHOOK = "webhook"  # the run's webhook URL, '' = none
    PRIORITY = "priority"  # 0-9, higher first (its queue score: shared/lua/prelude.lua queue_score)
    RUN_AT = "runAt"  # ms: when a scheduled run becomes due ('' or absent = at once)
    HELD = "held"  # '1' while the run waits for its session's active run to end
    # Concurrency keys (RunInput.concurrency): the key ('' = none) and the limit it was submitted with;
    # why a queued run is not in the queue yet ('concurrency:<key>' while it waits for a slot, '' = none)
    CONC_KEY = "concKey"
    CONC_LIMIT = "concLimit"
    WAITING_FOR = "waitingFor"
    GEN = "gen"  # dispatch number (one arq job each)
    EPOCH = "epoch"  # fencing token, taken by every job start and by every ending from outside
    OWNER = "owner"  # the lease id of the worker running it, '' = none
    LAST_SEQ = "lastSeq"  # the run stream's last seq
    CKPT = "ckpt"  # the machine state (commit.lua)
    CONFIG = "config"  # the run's configuration JSON, written once an attempt when checkpoints leave it out
    # Not in the hash: the archive record's copy of the transcript key (keys.Partition.transcript),
    # when checkpoints leave the transcript out
    TRANSCRIPT = "transcript"
    # The run's open tool claims, JSON {toolCallId: {"state": "pending", epoch, attempts}} (commit.lua,
    # in the same HSET as the checkpoint; a call's record in the tools hash supersedes its claim, which
    # the commit writing the record drops; acquire.lua answers them among the tool records).
    CLAIMS = "claims"
    ITERATIONS = "iterations"  # kept beside the checkpoint so an ending from outside reports it
    CRASHES = "crashes"  # attempts that lost their worker (AGENTMILL_MAX_RUN_CRASHES ends it, poison_run)
    # The seq of the run's opening event (its ``running`` status), written by the acquisition that
    # first took it (acquire_run.lua); absent: not opened there (a retry or fork, or a run taken up
    # from a checkpoint).
    OPENED = "opened"
    # The first event of the answer that put the parked run back on the queue (a client's tool result,
    # a human's decision), written by the script that recorded it (tool_results.lua,
    # settle_approval.lua): '<seq>:<kind>:<toolCallId>'; the resumed run leaves the machine's own out
    # (worker/runner/opening.py) while its checkpoint is older than the seq. Absent: none written.
    ANSWERED = "answered"
    ABORT = "abort"  # a pending abort request: its reason, or it and its actor (shared.actors), '' = none
    RESULT = "result"  # the RunResult JSON, once the run ended
    FINISHED_AT = "finishedAt"  # ms, Redis time
    ERROR_CODE = "errorCode"  # the ending's lastError code, for listings (not a completed run's)
    APPROVALS = "approvals"  # awaiting_human: {toolCallId: {decision, …}} JSON
    AWAITING_SINCE = "awaitingSince"  # ms, when it parked (awaiting_human, awaiting_tools)
    APPROVAL_TIMEOUT_MS = "approvalTimeoutMs"  # '' = none
    RUN_DEADLINE_MS = "runDeadlineMs"  # maxRunDurationMs from its start, bounds an approval wait; '' = none
    # awaiting_model (the economy lane): the model call waiting in a provider batch (its index), the
    # batch's answer once delivered (model_reply.lua: the call's index and the answer, JSON), the call
    # the reconciler sent to the standard lane at the economy deadline (its index), and when (ms)
    MODEL_AWAITED = "modelAwaited"
    MODEL_REPLY_INDEX = "modelReplyIndex"
    MODEL_REPLY = "modelReply"
    MODEL_STANDARD = "modelStandard"
    MODEL_SWITCH_AT = "modelSwitchAt"
    MODEL_WAIT = "modelWait"  # the call's wait as parked (JSON: customId, index, switchAt, endpoint)
    CLIENT_PENDING = "clientPending"  # awaiting_tools: the client calls it waits for (JSON)
    # '1': its input's storeContent is false (its content goes at its end), '0': it is kept; '' or
    # absent (a run stored before the field): its input tells (prelude.lua stores_no_content)
    NO_CONTENT = "noContent"
    ORIGIN = "origin"  # a retry's or fork's initial checkpoint payload (JSON, submit_restored.lua)
    LINEAGE = "lineage"  # {"retryOf": id} or {"forkOf": id, "atSeq": n} (JSON, submit_restored.lua)
    RETRIED_BY = "retriedBy"  # the retry that took its place in its batch (batch_replace.lua)
    # Sub-agents (shared/children.py). A child run: its parent's run id (the id its keys use) and the
    # parent's tool call it answers, and its ancestry (JSON: the ancestors' agents, the depth limit).
    PARENT_RUN = "parentRunId"  # written at the child's creation (spawn_child.lua)
    PARENT_CALL = "parentToolCallId"
    ANCESTRY = "ancestry"
    # A parent: the children of its current tool round (JSON [{toolCallId, runId}], commit.lua);
    # awaiting_children waits for each one's result in its tools hash.
    CHILDREN = "children"
    # A run that ended as a child or a parent: what its ending still owes the other runs ('d': its
    # result to its parent, 'a': an abort to its children), done by shared/children.py and cleared.
    HANDOFF = "handoff"
    # Its usage so far (agentmill_client.models.Usage: the checkpoint's RunState.usage), written by the
    # commit that publishes a ``usage`` event, so GET /v1/runs/{id} shows it while the run runs.
    USAGE_IN = "inputTokens"
    USAGE_OUT = "outputTokens"
    USAGE_ESTIMATED = "usageEstimated"  # '1' = some call's usage is agentmill's estimate
    USAGE_COST = "costUsd"  # absent = the model has no pricing
    USAGE_CACHE_READ = "cacheReadTokens"  # of inputTokens, read from a prompt cache (absent = 0)
    USAGE_CACHE_WRITE = "cacheWriteTokens"  # of inputTokens, written to a prompt cache (absent = 0)
    # Of its usage, the economy lane's share (EconomyUsagePart), written by its terminal commit when
    # not 0 (absent = 0): the archive keeps it with the run, as a batch's economy counters sum it.
    ECONOMY_IN = "economyInputTokens"
    ECONOMY_OUT = "economyOutputTokens"
    ECONOMY_COST = "economyCostNanoUsd"  # nano-USD (shared.quotas.NANO_USD), an integer
    ECONOMY_CACHE_READ = "economyCacheReadTokens"
    ECONOMY_CACHE_WRITE = "economyCacheWriteTokens"
    TRACE = "trace"  # the submitter's W3C traceparent, then a newline and its tracestate if any; unset = none
    ARCHIVED = "archived"  # '1' once in the archive (archive_done.lua): its events are read from there
    # With the archive on: the run loop a completed session run added to its session's history (JSON,
    # commit.lua), so the archive keeps it with the run; archive_done.lua drops it from Redis.
    LOOP = "loop"


class BatchField(StrEnum):
    """A batch's share in one partition; besides these, one counter per RunStatus value (its runs
    in that status)."""

    BATCH_ID = "batchId"
    TENANT = "tenant"
    CREATED_AT = "createdAt"
    TOTAL = "total"  # runs created in it here
    DONE = "done"  # of them ended
    OPEN = "open"  # '1' while a request adding runs to it is under way
    FINISHED_AT = "finishedAt"  # set once every run ended and no part is still to come
    WEBHOOK = "webhook"  # the batch's webhook URL, '' = none
    # Usage totals of its ended runs, added by the script that counts the run in ``done`` (track()):
    INPUT_TOKENS = "inputTokens"
    OUTPUT_TOKENS = "outputTokens"
    COST_USD = "costUsd"  # HINCRBYFLOAT; absent = no ended run had a price
    ESTIMATED_RUNS = "estimatedRuns"  # ended runs whose usage is (partly) an estimate
    CACHE_READ_TOKENS = "cacheReadTokens"  # of inputTokens, read from a prompt cache
    CACHE_WRITE_TOKENS = "cacheWriteTokens"  # of inputTokens, written to a prompt cache
    # Of those totals, the economy lane's share (the run hash's economy fields; absent = 0); the
    # standard lane's share is the rest.
    ECONOMY_INPUT_TOKENS = "economyInputTokens"
    ECONOMY_OUTPUT_TOKENS = "economyOutputTokens"
    ECONOMY_COST = "economyCostNanoUsd"  # nano-USD, an integer (HINCRBY)
    ECONOMY_CACHE_READ_TOKENS = "economyCacheReadTokens"
    ECONOMY_CACHE_WRITE_TOKENS = "economyCacheWriteTokens"


class DeletionField(StrEnum):
    """A deletion by metadata (keys.Partition.deletion, at its tenant's home; producer/deletion_jobs.py)."""

    DELETION_ID = "deletionId"
    TENANT = "tenant"
    METADATA = "metadata"  # the metadata to match (JSON object)
    STATE = "state"  # pending | running | done
    MATCHED = "matched"  # runs found matching so far
    DELETED = "deleted"  # of them deleted
    ACTOR = "actor"
    CREATED_AT = "createdAt"  # ms
    FINISHED_AT = "finishedAt"  # ms, once done


class SessionField(StrEnum):
    TENANT = "tenant"
    CREATED_AT = "createdAt"
    ACTIVE_RUN = "activeRun"  # the run the session runs now, '' = none


class ScheduleField(StrEnum):
    """A schedule's hash (producer/schedules/). Written at creation (schedule_create.lua) unless said
    otherwise."""

    TENANT = "tenant"
    CLIENT_ID = "clientId"  # the id its tenant knows it by
    DIGEST = "digest"  # of its definition: what a repeated create must match
    CRON = "cron"
    TIMEZONE = "timezone"
    INPUT = "input"  # the RunInput template JSON
    OVERLAP = "overlap"  # skip | enqueue | cancel_previous
    CATCHUP = "catchup"  # missed firings made at most after an outage (the latest ones)
    CREATED_AT = "createdAt"  # ms, Redis time
    PAUSED = "paused"  # '1' while paused (then it is not in the due set)
    NEXT_FIRE = "nextFire"  # ms: the next firing to make (advanced by schedule_advance.lua)
    LAST_FIRE = "lastFire"  # ms of the last firing made or skipped, '' = none yet
    LAST_RUN = "lastRun"  # the client's id of the last run it made, '' = none yet
    FIRED = "fired"  # runs made
    SKIPPED = "skipped"  # firings skipped (overlap skip, past the catch-up, a refused submission)
    LAST_ERROR = "lastError"  # why the last refused firing was refused, '' = none
    HELD = "held"  # why its tenant's firings are held ('' = not held; producer.schedules.firer)
    END_AT = "endAt"  # ms: no firing after it ('' = none)


class BudgetField(StrEnum):
    """A tenant's budget for one UTC day (keys.Partition.tenant_budget, at the tenant's home
    partition; budget_reserve.lua, budget_settle.lua). Costs in integers of nano-USD (exact sums)."""

    SPENT_TOKENS = "spentTokens"  # settled: the calls' actual usage
    SPENT_COST = "spentNanoUsd"
    HELD_TOKENS = "heldTokens"  # reserved by calls in flight (their worst case), until settled or expired
    HELD_COST = "heldNanoUsd"
    RELEASED = "releasedHolds"  # holds that expired unsettled (their worker died) and were released
    REFUSED = "refusedCalls"  # calls the day could not afford: from the first, the day counts as spent
    OVERCOUNT = "overcountPermille"  # the day's highest ratio of a call's settled usage to its hold
    # (tokens or cost, in thousandths; set by settlements above 1000): later holds are multiplied by it


class EconomyBatchField(StrEnum):
    """One economy batch of a provider endpoint (endpoint_keys.economy_batch_key; worker/economy/): each state
    is written before the next is begun, so a batcher taking over knows where its predecessor was."""

    STATE = "state"  # EconomyBatchState
    MODEL = "model"
    IDS = "ids"  # JSON list of its custom_ids
    CLOSED_AT = "closedAt"  # ms
    FILE = "file"  # the provider's id of the uploaded input (OpenAI: a file id)
    PROVIDER_ID = "providerId"  # the provider's batch id, once created
    POLLS = "polls"  # status polls so far (the backoff's step)
    CANCELLED = "cancelled"  # "1": every request of it left for the standard lane; the provider was asked to cancel it


class EconomyBatchState(StrEnum):
    CLOSED = "closed"  # its requests are chosen; nothing sent
    CREATING = "creating"  # its input is uploaded (FILE); the batch may or may not exist at the provider
    SUBMITTED = "submitted"  # the provider holds it (PROVIDER_ID)


class UsagePart(StrEnum):
    """What a tenant's usage hash of a day counts per agent (keys.Partition.usage_day, fields
    ``usage_field``): a worker's terminal commit (commit.lua, from worker/runner/tally.py) and an
    ending from outside a worker (prelude.lua's finalize) add to them; GET /v1/usage sums them."""

    IN = "in"  # input tokens
    OUT = "out"  # output tokens
    COST = "cost"  # nano-USD (shared.quotas.NANO_USD), an integer: exact sums
    RUNS = "runs"  # runs that started (their configuration resolved) and ended
    CACHE_READ = "cr"  # of the input tokens, read from a prompt cache
    CACHE_WRITE = "cw"  # of the input tokens, written to a prompt cache


class EconomyUsagePart(StrEnum):
    """Of a day's UsagePart counts, the economy lane's share: the model calls a provider batch
    answered, and the runs submitted in the economy lane (a worker's terminal commit adds them; the
    standard lane's share is the rest: GET /v1/usage's ``lanes``). An ending from outside a worker
    counts in the standard lane's share."""

    IN = "e.in"
    OUT = "e.out"
    COST = "e.cost"
    RUNS = "e.runs"
    CACHE_READ = "e.cr"
    CACHE_WRITE = "e.cw"


def usage_field(agent: str, what: UsagePart | EconomyUsagePart) -> str:
    """A field of a tenant's usage hash for one day (keys.Partition.usage_day): ``<agent>|<what>``."""
    return f"{agent}|{what}"


USAGE_PARTS = tuple(UsagePart)


class ApiKeyField(StrEnum):
    """A managed API key's hash (keys.Partition.api_key; shared/api_keys.py). Never the key itself."""

    TENANT = "tenant"
    NAME = "name"
    SCOPES = "scopes"  # comma list of shared.api_keys.Scope values
    DIGEST = "digest"  # hex HMAC-SHA256(AGENTMILL_KEY_SECRET, the key's secret part)
    CREATED_AT = "createdAt"  # ms
    CREATED_BY = "createdBy"  # the actor that created it (a key id, or token-file, or cli)
    EXPIRES_AT = "expiresAt"  # ms, '' = never
    REVOKED_AT = "revokedAt"  # ms, '' = not revoked
    LAST_USED_AT = "lastUsedAt"  # ms, written at most once a minute per key and API process


class AuditField(StrEnum):
    """One entry of a tenant's audit stream (keys.Partition.audit; producer/audit.py). Its time is its
    stream entry id's (Redis time, ms)."""

    ACTION = "action"  # producer.audit.Action
    TARGET = "target"  # the run, batch, schedule or key acted on (the id the tenant knows)
    ACTOR = "actor"  # the key id, or token-file
    ACTOR_NAME = "actorName"  # the key's name ('' for token-file)
    TENANT = "tenant"
    REQUEST_ID = "requestId"
    DETAIL = "detail"  # a short free text ('' = none): e.g. a batch's run count
