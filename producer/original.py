"""The run a retry or fork continues (producer/restore.py), as it reads it: ``Original``; read from the
archive (shared/archive/original.py) once archiving dropped the run's input and checkpoint from its
Redis hash, or Redis forgot the run; and a retry taking an archived run's place in its batch.

A finished run reads the same from all three places: its input and last checkpoint, its events up to
a seq (a fork's state is rebuilt from them), its tool records, its batch and item index. What the
archive cannot give is a 409 naming why, never a 500: its first events trimmed by the stream's MAXLEN
before it was archived (``events_trimmed``, as from Redis), no input kept (``input_not_archived``),
an API without the archive's URL (``archive_not_configured``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentmill_client.models import EventKind, RunStatus
from producer.submission import SubmissionError
from shared import checkpoint as checkpoints
from shared import keys, payload_crypto
from shared.archive.original import ArchivedOriginal, leave_batch, original
from shared.calls.batches import BatchReplace, BatchReplaceVerdict
from shared.fields import RunField
from shared.off_loop import off_loop
from shared.script_sending import run_script
from shared.tool_records import ToolRecord

if TYPE_CHECKING:
    from producer.service import Producer

__all__ = ["REBUILT_FROM", "Original", "archived_original", "take_place", "trimmed", "unknown"]

F = RunField
# The events a state is rebuilt from (worker.machine.rebuild reads no others).
REBUILT_FROM = {EventKind.ASSISTANT_MESSAGE, EventKind.TOOL_CALL, EventKind.TOOL_RESULT, EventKind.ERROR,
                EventKind.STATUS}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Original:
    """A run as a retry or fork reads it: ``key`` the id its keys use, ``shown`` its client's id."""

    key: str
    shown: str
    part: keys.Partition | None  # None: only the archive has it, on a partition no longer in the layout
    status: RunStatus
    input: dict[str, Any]
    checkpoint: dict[str, Any] | None
    last_seq: int
    batch: str
    item: int | None
    records: dict[str, ToolRecord]
    events: list[tuple[int, str, dict[str, Any]]]  # seq, kind, payload (a fork's, up to its seq)
    origin: dict[str, Any] | None  # its own origin, when it was itself a retry or fork
    archived: ArchivedOriginal | None = None  # its row, when read from the archive
    in_redis: bool = True  # its hash is still in Redis (archived: without its input and checkpoint)


def unknown(run_id: str) -> SubmissionError:
    return SubmissionError("unknown_run", f"no run {run_id}", status=404)


def trimmed(run_id: str, first: str) -> SubmissionError:
    return SubmissionError(
        "events_trimmed",
        f"run {run_id}'s stream no longer holds its first events (it starts at {first}): "
        "its state at a seq cannot be rebuilt; retry it instead",
        status=409,
    )


def _refused(code: str, message: str) -> SubmissionError:
    return SubmissionError(code, message, status=409)


async def archived_original(
    p: Producer, run_id: str, tenant: str, part: keys.Partition | None, h: dict[str, str], upto: int
) -> Original:
    """``tenant``'s run ``run_id`` from the archive: ``h`` its hash's fields when Redis still holds it
    archived ({} when Redis forgot it, or holds another tenant's), which say its status and batch
    now (a retry may have taken its place since)."""
    if p.archive is None:
        if not h:
            raise unknown(run_id)
        raise _refused(
            "archive_not_configured",
            f"run {run_id} is archived (its input and checkpoint are only in the archive) and this API "
            "has no AGENTMILL_ARCHIVE_URL to read them",
        )
    a = await original(p.archive.store, p.scope(tenant).lookups(run_id), tenant, upto)
    if a is None:
        raise unknown(run_id)
    if upto and upto <= a.last_seq and a.first_seq != 1:
        raise trimmed(run_id, f"{a.first_seq}-0" if a.first_seq is not None else "no event")
    raw_input = a.input or a.record.get(F.INPUT)
    if not raw_input:
        raise _refused("input_not_archived", f"the archive holds no input of run {run_id}: it cannot go on")
    record = h or a.record
    if not h:  # its partition: the one its events were on
        part = next((q for q in p.parts.parts if q.events(a.key_id) == a.stream_key), None)
    return await off_loop(_decoded, a, run_id, part, record, raw_input, in_redis=bool(h))


def _decoded(
    a: ArchivedOriginal,
    shown: str,
    part: keys.Partition | None,
    record: Any,
    raw_input: Any,
    *,
    in_redis: bool,
) -> Original:
    """The archived run, its payloads opened and parsed: the costly part, run off the loop
    (shared/off_loop.py) as a run read from Redis is."""
    ckpt = checkpoints.load(a.record.get(F.CKPT), a.record.get(F.CONFIG), a.record.get(F.TRANSCRIPT))
    origin = record.get(F.ORIGIN)
    return Original(
        key=a.key_id, shown=shown, part=part, status=RunStatus(record.get(F.STATUS) or a.status),
        input=payload_crypto.loads(raw_input), checkpoint=ckpt,
        last_seq=a.last_seq, batch=record.get(F.BATCH, ""), item=a.item_index,
        records={i: ToolRecord.from_json(payload_crypto.open_bytes(r)) for i, r in a.tools.items()},
        events=[(s, k, payload_crypto.loads(pl)) for s, k, pl in a.events if k in REBUILT_FROM],
        origin=payload_crypto.loads(origin) if origin else None, archived=a, in_redis=in_redis,
    )  # fmt: skip


async def take_place(p: Producer, o: Original, retry_id: str) -> bool:
    """The retry ``retry_id`` (as its client knows it) takes ``o``'s place in its batch, once
    (batch_replace.lua): False when another retry took it first or the batch is gone. An archived
    run's place is taken in the archive first (the one write that wins); the batch's counters in
    Redis follow, and its hash when Redis still holds it."""
    if o.part is None or not o.batch:
        return False
    call = BatchReplace(o.key, retry_id)
    if o.archived is not None:
        if p.archive is None or not await leave_batch(p.archive.store, o.archived, o.batch, retry_id):
            return False
        call = BatchReplace(o.key, retry_id, o.archived.tenant, o.batch, o.status.value)
    k, a = p.scripts.framing.frame(o.part, call.keys(o.part), call.argv())
    return (
        BatchReplace.verdict(await run_script(p.parts, p.scripts.batch_replace, o.part, k, a))
        is BatchReplaceVerdict.LEFT
    )
