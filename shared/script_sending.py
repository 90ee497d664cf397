"""A script call on the partitions, framed and sent here, on one floor for the producer, the
worker and shared code alike.

- Framing (``Framing.frame``): a script on a partition is called with its own KEYS followed by the
  partition's fixed keys, and with the partition's context as its last ARGV (its key prefixes,
  the arq job template, the settings the scripts read: ``CONTEXT_EXTRA``), so the Lua builds no key
  format and reads no setting of its own (prelude.lua takes them off again). A deployment's
  ``Scripts`` carry its framing (``Scripts.framing``). With Functions, the call as sent carries a
  token for the context and, with keys of its own, not the fixed keys (shared.functions).
- Sending: one script on one partition (``run_script``: ``Partitions.call``; ``run_staged``: with large
  payloads written by a plain HSET just before it, in the same round trip), one script on several
  partitions in one round trip per node (``run_many``: ``Partitions.sending``; reads on several
  partitions: ``Partitions.pipelined``). Every call follows a failover or a moved slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from agentmill_client import limits
from shared import dispatch, functions, index_keys, keys
from shared.functions import Script, missing
from shared.partitions import Partitions, partition_count
from shared.settings import Settings

__all__ = [
    "CONTEXT_EXTRA",
    "Call",
    "Framing",
    "Parts",
    "as_partitions",
    "run_many",
    "run_script",
    "run_staged",
]

Parts = Partitions[Redis]
# One script call already framed (Framing.frame, or plain for a script off the partitions): where it
# runs, its KEYS and its ARGV.
Call = tuple[keys.Partition, list[Any], list[Any]]

# A layout of up to this many partitions has every partition's context made, and its tokens kept, at
# the first call (shared.functions.know_context); a larger one, each partition's at its own first.
EAGER_PARTITIONS = 64

# The context's fields after the partition's key prefixes (keys.CONTEXT_FIELDS): the arq job
# template's four pieces (dispatch.JOB_TEMPLATE) and the settings the scripts read.
CONTEXT_EXTRA = (
    "job_a", "job_b", "job_c", "job_d", "maxlen", "retention", "queued_check_ms", "job_expire_ms",
    "index_max", "batch_delivery", "max_run_crashes", "aging_ms", "archive_on", "usage_ttl", "key_waiting_max",
)  # fmt: skip


class Framing:
    """The KEYS and ARGV of script calls on the partitions, with ``settings`` in their context
    (None: the settings' declared defaults, whatever the environment says)."""

    def __init__(self, settings: Settings | None = None) -> None:
        s = Settings.model_construct() if settings is None else settings
        extra = {
            **dict(zip(("job_a", "job_b", "job_c", "job_d"), dispatch.JOB_TEMPLATE, strict=True)),
            "maxlen": str(s.stream_maxlen), "retention": str(s.retention_s),
            "queued_check_ms": str(s.queued_check_ms), "job_expire_ms": str(dispatch.JOB_EXPIRE_MS),
            "index_max": str(limits.MAX_INDEX_RUNS), "batch_delivery": index_keys.BATCH_DELIVERY,
            "max_run_crashes": str(s.max_run_crashes), "aging_ms": str(s.priority_aging_ms),
            "archive_on": "1" if s.archive_url else "", "usage_ttl": str(s.usage_retention_days * 86_400),
            "key_waiting_max": str(s.key_max_waiting),
        }  # fmt: skip
        self._extra = keys.SEP.join(extra[f] for f in CONTEXT_EXTRA) + keys.SEP
        self._contexts: dict[int, str] = {}

    def context(self, part: keys.Partition) -> str:
        """The last ARGV of every script on ``part``. The first one asked for makes those of every
        partition of its layout (up to ``EAGER_PARTITIONS``) and has shared.functions keep their
        tokens: a node that does not know them yet is told them all at once, not one partition's
        first call after another."""
        c = self._contexts.get(part.index)
        if c is None:
            c = self._contexts[part.index] = part.context + self._extra
            functions.know_context(c, self.fixed(part))
            if part.count <= EAGER_PARTITIONS:
                for i in range(part.count):
                    if i not in self._contexts:
                        other = keys.Partition(i, part.count)
                        self._contexts[i] = other.context + self._extra
                        functions.know_context(self._contexts[i], self.fixed(other))
        return c

    @staticmethod
    def fixed(part: keys.Partition) -> list[str]:
        """The partition's fixed keys, which end the KEYS of every call on it."""
        return [part.queue, part.live, part.awaiting, part.workers, part.webhooks, part.scheduled, part.depth,
                part.wake]  # fmt: skip

    def frame(
        self, part: keys.Partition, own_keys: list[Any], args: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        """(KEYS, ARGV) of a script call on ``part``: its own keys then the partition's fixed keys,
        its own arguments then the partition's context (prelude.lua takes them off again: from the
        end, which costs Lua nothing, where taking the first ARGV off moved every other one)."""
        return [*own_keys, *self.fixed(part)], [*args, self.context(part)]

    def call(self, part: keys.Partition, own_keys: list[Any], args: list[Any]) -> Call:
        """A call on ``part`` framed, for ``run_script`` and ``run_many``."""
        return (part, *self.frame(part, own_keys, args))


def as_partitions(redis: Redis | Parts, settings: Settings) -> Parts:
    """A Partitions as is; a plain client as the settings' partitions all on that one client (the
    caller's, who closes it)."""
    if isinstance(redis, Partitions):
        return redis
    return Partitions.of_client(redis, partition_count(settings))


async def run_script(parts: Parts, script: Script, part: keys.Partition, k: list[Any], a: list[Any]) -> Any:
    """``script`` on ``part``'s node (loaded there when the node does not know it)."""

    async def go(c: Redis) -> Any:
        return await script(keys=k, args=a, client=c)

    return await parts.call(part, go)


async def run_staged(
    parts: Parts,
    script: Script,
    part: keys.Partition,
    staged: tuple[str, dict[str, Any] | bytes | str],
    k: list[Any],
    a: list[Any],
) -> Any:
    """``script`` on ``part``'s node after ``staged`` (a key and its hash's fields, or its string,
    kept keys.STAGED_TTL_MS) is written by plain commands, all pipelined on one connection, so the
    script runs once they are there: payloads of megabytes a Lua script would copy in (each byte into
    a Lua string, then into Redis again: milliseconds in which no other command runs) and the script
    renames into place."""
    key, value = staged

    async def go(c: Redis) -> Any:
        async with c.pipeline(transaction=False) as p:
            if isinstance(value, dict):
                p.hset(key, mapping=value)
                p.pexpire(key, keys.STAGED_TTL_MS)
            else:
                p.set(key, value, px=keys.STAGED_TTL_MS)
            script.queue(p, k, a)
            got = await p.execute(raise_on_error=False)
        if isinstance(got[-1], Exception):
            if not missing(got[-1]):
                raise got[-1]
            return await script(keys=k, args=a, client=c)  # loads it, the payloads staged already
        return got[-1]

    return await parts.call(part, go)


async def run_many(parts: Parts, script: Script, calls: Sequence[Call]) -> list[Any]:
    """``script`` once per call, one round trip per node (all nodes at once, ``Partitions.sending``:
    a call answered NOSCRIPT, "Function not found" or hit by a redirection is sent again); the
    replies in order, any error reply raised. One call: just that call."""
    if len(calls) == 1:
        return [await run_script(parts, script, *calls[0])]
    out = parts.sending()
    for part, k, a in calls:
        out.add_script(part, script, k, a)
    replies = await out.replies()
    for r in replies:
        if isinstance(r, Exception):
            raise r
    return replies
