"""Submitting many runs at once (``Producer.submit_many``), through the Submitter's public steps:
one quota admission for the request, chunks of one partition sent while the next items are
validated (producer.chunk_sender), the batch's shares and the ids held elsewhere looked at
meanwhile, and the answers put back in request order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agentmill_client import limits
from agentmill_client.models import RunInput
from producer.batch_shares import batch_gate, close_batch
from producer.placement import Holder, verdict
from producer.prepared import Prepared
from producer.schemas_ready import schemas_ready
from producer.scope import batch_run_prefix, claimed_home, claimed_id
from producer.submission import SubmissionError, Submitted, outcome
from producer.submitter import Submitter
from shared import keys
from shared.calls.submission import SubmitVerdict
from shared.quotas import DEFAULT_TENANT, Quota

__all__ = ["SUBMIT_CHUNK", "submit_many"]

SUBMIT_CHUNK = 100  # runs per SUBMIT_MANY call: small enough that Redis runs one while the next is prepared
Chunk = list[tuple[int, Prepared]]  # runs of one partition, with their index in the request


async def submit_many(
    p: Submitter,
    items: Sequence[RunInput | dict[str, Any]],
    *,
    tenant: str = DEFAULT_TENANT,
    batch_id: str | None = None,
    offset: int = 0,
    batch_webhook: str | None = None,
    quota: Quota | None = None,
    more: bool = False,
    trace: str = "",
) -> list[Submitted | SubmissionError]:
    """Validate every item and enqueue the valid ones, in order: one script call per chunk of
    SUBMIT_CHUNK runs of one partition, each chunk sent as soon as it is ready on one connection
    per node, so Redis runs a chunk while the next one is validated, and all replies are read at
    the end. With ``batch_id`` the runs form a batch (producer.listing); items without a runId
    then get one derived from (batch, offset + index), so sending the same batch again creates
    nothing new. ``more``: more parts of the batch follow, so it cannot finish yet; a request
    without it closes the batch, which then finishes (and fires its webhook, once) when its runs
    have all ended."""
    p.check_batch_size(len(items))
    if not 0 <= offset <= limits.MAX_BATCH_OFFSET:  # the derived run ids stay short (MAX_ID_CHARS)
        raise SubmissionError("invalid_input", f"offset: from 0 to {limits.MAX_BATCH_OFFSET}", field="offset")
    layout = p.parts.layout
    out: list[Submitted | SubmissionError | None] = [None] * len(items)
    seen: set[str] = set()
    prefix = batch_run_prefix(tenant, batch_id) if batch_id else None
    scope = p.scope(tenant)

    def default(i: int, raw: RunInput | dict[str, Any]) -> str:
        """An item's id if it names none: derived in a batch, else drawn to live at home."""
        if prefix:
            return f"{prefix}{offset + i}"
        return "" if claimed_id(raw) else p.generated(scope, raw)

    def key_of(raw: RunInput | dict[str, Any], d: str) -> tuple[str, str]:
        """The ids the keys of an item's run and session use."""
        rid = claimed_id(raw) or d
        return scope.key(rid), claimed_home(raw, rid, scope)

    defaults = [default(i, raw) for i, raw in enumerate(items)]
    choices = await p.choices(tenant, items)  # the tenant's agents they name (producer.agents)
    # The tenant's quota admits the whole request at once, in calls that Redis runs while the
    # first chunk is validated; nothing is sent before they answer (a check per chunk would
    # wait for Redis to finish the previous chunk every time). Items that then fail validation
    # were counted and are forgotten after ADMIT_GRACE_MS, as any refused submission. On more
    # than one partition, the pointers of the ids not generated here are claimed meanwhile
    # (producer.placement), and the batch's shares looked at (producer.batch_shares.batch_gate).
    placed: dict[int, list[str]] = {}
    chosen: dict[int, tuple[str, keys.Partition]] = {}  # item -> (its id, where its id is claimed)
    if layout.count == 1:  # one partition: every run lives there, no pointer to claim
        placed[0] = [scope.key(claimed_id(raw) or d) for raw, d in zip(items, defaults, strict=True)]
    for i, (raw, d) in enumerate(zip(items, defaults, strict=True) if layout.count > 1 else ()):
        rid, sid = key_of(raw, d)
        part = p.place(rid, sid)
        placed.setdefault(part.index, []).append(rid)
        if prefix is not None or claimed_id(raw) is not None:
            chosen[i] = (rid, part)
    admitted = asyncio.ensure_future(p.admit(tenant, placed, quota, list(chosen.values())))
    gated = (
        asyncio.ensure_future(batch_gate(p.parts, tenant, batch_id, batch_webhook or ""))
        if batch_id and layout.count > 1
        else None
    )
    await asyncio.sleep(0)  # let them go out
    holders: dict[int, Holder] = {}

    async def ready() -> tuple[frozenset[int], str]:
        """(the partitions that refuse the batch's new runs, the batch webhook its new shares
        get) once admitted."""
        if chosen and not holders:
            holders.update(zip(chosen, await admitted, strict=True))
        await admitted
        refusing, webhook = await gated if gated is not None else (frozenset(), batch_webhook or "")
        return refusing, webhook

    def refused(exc: SubmissionError) -> list[Submitted | SubmissionError]:
        return [
            SubmissionError(exc.code, f"runs.{i}: {exc.message}", status=exc.status, field=f"runs.{i}",
                            retry_after_s=exc.retry_after_s)
            for i in range(len(items))
        ]  # fmt: skip

    unsent: dict[int, Chunk] = {}  # per partition: its runs not sent yet
    sent: list[Chunk] = []
    answered: list[tuple[Chunk, Any]] = []  # answered here (id held, batch finished); None: alone

    def misplaced(i: int, prep: Prepared, part: keys.Partition) -> bool:
        """Not where its id was claimed (or drawn to live), as its input turned out: it goes alone."""
        expected = chosen.get(i) or (prep.run_id, layout.home(prep.run_id))
        return layout.count > 1 and expected != (prep.run_id, part)

    async def flush(part: keys.Partition, chunk: Chunk) -> None:
        refusing, webhook = await ready()
        go: Chunk = []
        for i, prep in chunk:
            if part.index in refusing:  # a finished batch with no share here (the script would add one)
                answered.append(([(i, prep)], [SubmitVerdict.BATCH_FINISHED, ""]))
            elif misplaced(i, prep, part):
                answered.append(([(i, prep)], None))
            elif (holder := holders.get(i)) is not None:
                answered.append(([(i, prep)], list(verdict(holder, tenant, prep.digest))))
            else:
                go.append((i, prep))
        if any(prep.run.rate is not None for _, prep in go):
            started = await p.starts(tenant, [prep for _, prep in go])
            for (i, _), got in zip(go, started, strict=True):
                if isinstance(got, SubmissionError):
                    got.field, got.message = f"runs.{i}.{got.field}", f"runs.{i}: {got.message}"
                    out[i] = got
            go = [(i, got) for (i, _), got in zip(go, started, strict=True) if isinstance(got, Prepared)]
        if go:
            await sender.send(
                part, [p for _, p in go], webhook, [offset + i for i, _ in go] if batch_id else ()
            )
            sent.append(go)

    await schemas_ready(items)  # off the loop, before each item's prepare checks them
    async with p.sender(tenant, batch_id or "") as sender:
        try:
            for i, raw in enumerate(items):
                try:
                    prep = p.prepare(raw, tenant, defaults[i], quota, trace, choices)
                except SubmissionError as exc:
                    exc.field = f"runs.{i}.{exc.field}" if exc.field else f"runs.{i}"
                    exc.message = f"runs.{i}: {exc.message}"
                    out[i] = exc
                    continue
                if prep.run_id in seen:
                    out[i] = SubmissionError(
                        "duplicate",
                        f"runs.{i}: runId {prep.run.run_id} appears twice in the batch",
                        field=f"runs.{i}.runId",
                    )
                    continue
                seen.add(prep.run_id)
                part = p.place(prep.run_id, prep.home)
                chunk = unsent.setdefault(part.index, [])
                chunk.append((i, prep))
                if len(chunk) == SUBMIT_CHUNK:
                    await flush(part, chunk)  # raises the quota's refusal before anything is sent
                    unsent[part.index] = []
            await ready()
        except SubmissionError as exc:
            return refused(exc)
        finally:
            for f in (admitted, gated):  # an unexpected error while validating: do not leave them
                if f is not None and not f.done():
                    f.cancel()
                elif f is not None and not f.cancelled():
                    f.exception()  # retrieved (raised above, or not needed any more)
        for index, chunk in unsent.items():
            if chunk:
                await flush(layout.parts[index], chunk)
        answers = await sender.replies()
    for chunk, answer in [*zip(sent, answers, strict=True), *answered]:
        for k, (i, prep) in enumerate(chunk):
            if isinstance(answer, Exception):
                out[i] = SubmissionError("enqueue_failed", f"runs.{i}: {answer}", status=503)
                continue
            try:
                if answer is None:
                    out[i] = await _alone(p, prep, tenant, batch_id or "", offset + i)
                    continue
                out[i] = outcome(prep.run, answer[2 * k : 2 * k + 2])
            except SubmissionError as exc:
                out[i] = exc
    if batch_id and not more:
        await close_batch(p.parts, p.scripts, tenant, batch_id)
    return [o for o in out if o is not None]


async def _alone(
    p: Submitter, prep: Prepared, tenant: str, batch_id: str, item: int
) -> Submitted | SubmissionError:
    """One run of a batch (item ``item`` of it) submitted on its own (placed elsewhere than
    claimed)."""
    try:
        return await p.send(prep, tenant, batch_id, item=item)
    except SubmissionError as exc:
        return exc
