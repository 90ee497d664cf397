"""Every multi-key Redis change, as a Lua script registered once per client. The scripts are the
files in shared/lua/ (one per script, its KEYS and ARGV at its top), each run after prelude.lua.

The run hash (keys.run_key) is the source of truth: ``status``, ``gen`` (dispatch number, one arq
job each), ``epoch`` (fencing token, taken by every job start), ``owner`` (the lease id of the worker
running it), ``lastSeq`` (the stream's last seq), ``ckpt`` (the machine state), ``result``.

Liveness is per worker, not per run: each worker renews one entry in keys.WORKERS (its lease
expiry) per beat, whatever its number of runs, and keeps the runs it holds in its runs set. A run
is carried while its owner's lease is unexpired; the reconciler re-dispatches the runs of a worker
whose lease expired. Abort requests for a running run go to its owner's inbox, read by the beat.

Guarantees the scripts give:
- the stream holds seq 1..n exactly: every append checks ``lastSeq == first - 1`` and uses the
  entry id ``<seq>-0``, so Redis itself refuses a repeat;
- a writer whose epoch is not the run's current epoch is refused (``fenced``) and writes nothing;
- events, checkpoint, tool claims and tool results of one step land in one atomic commit.

Time comes from Redis (``TIME``), so worker clocks never decide whose lease has expired.
A run that ends with a webhook configured is pushed on keys.WEBHOOKS for delivery.
Scripts that enqueue an arq job also touch arq's queue key, which is outside the run's hash slot:
that is fine on a single Redis or Sentinel (what arq supports), not on Cluster.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from shared import keys, limits
from shared.statuses import TERMINAL

__all__ = ["LUA_DIR", "SCRIPTS", "Scripts", "source", "text"]

LUA_DIR = Path(__file__).with_name("lua")
# Each script's files after prelude.lua, in order (submit_one.lua is a function both submits call).
SCRIPTS: dict[str, tuple[str, ...]] = {
    "submit": ("submit_one", "submit"),
    "submit_many": ("submit_one", "submit_many"),
    **{
        name: (name,)
        for name in (
            "batch_close", "list_runs", "acquire", "commit", "beat", "forget_worker", "release", "redispatch", "abort",
            "settle_approval", "tool_results", "claim_jobs", "claim_webhooks", "capacity_acquire",
            "capacity_renew", "capacity_release", "capacity_pause", "admit_tenant",
        )
    },
}  # fmt: skip


class Scripts:
    """The scripts registered on one client; call as ``await scripts.commit(keys=…, args=…)``."""

    submit: AsyncScript
    submit_many: AsyncScript
    list_runs: AsyncScript
    acquire: AsyncScript
    commit: AsyncScript
    beat: AsyncScript
    forget_worker: AsyncScript
    release: AsyncScript
    redispatch: AsyncScript
    abort: AsyncScript
    settle_approval: AsyncScript
    batch_close: AsyncScript
    tool_results: AsyncScript
    claim_jobs: AsyncScript
    claim_webhooks: AsyncScript
    capacity_acquire: AsyncScript
    capacity_renew: AsyncScript
    capacity_release: AsyncScript
    capacity_pause: AsyncScript
    admit_tenant: AsyncScript

    def __init__(
        self,
        redis: Redis,
        *,
        queued_check_ms: int = 60_000,
        stream_maxlen: int = 10_000,
        retention_s: int = 604_800,
    ) -> None:
        from shared.dispatch import JOB_EXPIRE_MS, RUN_FUNCTION

        tokens = {
            "__WEBHOOKS__": keys.WEBHOOKS,
            "__QUEUE__": keys.QUEUE,
            "__LIVE__": keys.LIVE,
            "__AWAITING__": keys.AWAITING,
            "__WORKERS__": keys.WORKERS,
            "__PREFIX__": keys.PREFIX,
            "__JOBPREFIX__": keys.arq_job_key(""),
            "__FUNCTION__": RUN_FUNCTION,
            "__JOB_EXPIRE_MS__": str(JOB_EXPIRE_MS),
            "__QUEUED_CHECK_MS__": str(queued_check_ms),
            "__MAXLEN__": str(stream_maxlen),
            "__RETENTION__": str(retention_s),
            "__INDEX_MAX__": str(limits.MAX_INDEX_RUNS),
            "__BATCH_DELIVERY__": keys.BATCH_DELIVERY,
            "__TERMINAL__": ", ".join(f"{s.value}=true" for s in sorted(TERMINAL)),
        }
        for name, source in _rendered(tuple(tokens.items())).items():
            setattr(self, name, redis.register_script(source))


@functools.cache
def source(name: str) -> str:
    """A script's source as written (prelude first), its tokens not filled in yet."""
    return "".join((LUA_DIR / f"{part}.lua").read_text() for part in ("prelude", *SCRIPTS[name]))


@functools.lru_cache(maxsize=16)
def _rendered(tokens: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Every script's source with the tokens filled in (once per distinct settings)."""
    out = {}
    for name in SCRIPTS:
        text = source(name)
        for token, value in tokens:
            text = text.replace(token, value)
        out[name] = text
    return out


def text(value: Any) -> str:
    """Decode a script reply element (bytes from a client without decode_responses)."""
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)
