"""The payloads a run's acquisition left out of its script's reply, read after it with plain commands.

acquire_run.lua (the claim's and acquire's body) answers a payload from ``LARGE_BYTES`` on as nil: a
fork's input and state, a long run's checkpoint, configuration or transcript. Copied through Lua, a
megabyte holds Redis for milliseconds in which no other tenant's command runs; a plain HMGET copies it
once. A run without one (nearly all) has nothing here to read: no round trip.

Why a read after the script is the script's read: these payloads change only at the run's creation
(input, origin) and at its commits (checkpoint, configuration, transcript), and a commit is fenced by
the run's epoch and its owner's lease. The epoch changes only when the run is taken again or ended
from outside. So the read, one transaction (MULTI) with the run's epoch, owner and status, either
finds the epoch and owner the acquisition left, and then the payloads are those the script saw (no
commit of this epoch has been made: this worker would have made it), or finds them changed, and then
this worker no longer holds the run: it is answered as a refused acquisition (busy, terminal, missing)
and starts nothing, as if the script had found the run so.
"""

from __future__ import annotations

from typing import Any

from agentmill_client.statuses import TERMINAL
from shared.calls.steps import AcquireVerdict
from shared.fields import RunField as F
from shared.keys import Partition
from shared.partitions import Partitions
from shared.scripts import text
from worker.core.acquisition import NotAcquired

__all__ = ["LEFT_FIELDS", "TRANSCRIPT", "left_out", "read_left_out"]

# acquire_run.lua's reply: the positions that may be left out, the run hash's field of each
LEFT_FIELDS = {3: F.CKPT, 4: F.INPUT, 9: F.ORIGIN, 13: F.CONFIG}
TRANSCRIPT = 14  # the transcript key's


def left_out(r: Any) -> list[int]:
    """The positions of an ok reply left out (nil), in order."""
    return [i for i in (*LEFT_FIELDS, TRANSCRIPT) if len(r) > i and r[i] is None]


async def read_left_out(
    parts: Partitions[Any],
    part: Partition,
    run_id: str,
    r: list[Any],
    left: list[int],
    epoch: int,
    lease_id: str,
) -> list[Any] | NotAcquired:
    """``r`` with the payloads at ``left`` read (one transaction on the run's partition), or the
    refusal the acquisition would have met had it come now (the module's docstring)."""
    fields = [LEFT_FIELDS[i] for i in left if i in LEFT_FIELDS]
    run = part.run(run_id)

    async def read(c: Any) -> list[Any]:
        async with c.pipeline(transaction=True) as p:
            p.hmget(run, [F.EPOCH, F.OWNER, F.STATUS, *fields])
            if TRANSCRIPT in left:
                p.get(part.transcript(run_id))
            return list(await p.execute())

    got = await parts.call(part, read)
    (now_epoch, owner, status, *values), transcript = got[0], got[1] if len(got) > 1 else b""
    if now_epoch is None:
        return NotAcquired(AcquireVerdict.MISSING, "")
    if int(text(now_epoch)) != epoch or text(owner or b"") != lease_id:
        terminal = text(status or b"") in TERMINAL
        verdict = AcquireVerdict.TERMINAL if terminal else AcquireVerdict.BUSY
        return NotAcquired(verdict, text(status or b"") if terminal else text(owner or b""))
    out = list(r)
    for i, v in zip((i for i in left if i in LEFT_FIELDS), values, strict=True):
        out[i] = v if v is not None else b""
    if TRANSCRIPT in left:
        out[TRANSCRIPT] = transcript if transcript is not None else b""
    return out
