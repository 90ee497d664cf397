"""Retry and fork: a new run that continues a run that ended, instead of starting over.

- ``retry``: a failed or aborted run again, from its last checkpoint (its state, and the tool results
  it recorded, copied: served, never executed again) or, ``from_start``, from its input.
- ``fork``: any run that ended, from the state at one of its event seqs, with messages appended.
  The state at a seq is rebuilt here from the run's events up to it (worker.machine.origin): no
  checkpoint is kept per step. The fork stores that state alone, as a retry stores a checkpoint: not
  the run's events, last checkpoint and own origin, which made each fork of a fork carry the whole
  chain before it. Only the tool results published by then are copied.

What the new run stores to start from (its state and copied records) is bounded by
limits.MAX_RESTORED_BYTES, a fork's inputMessages as a submission's are: 413 ``too_large`` past it.
- ``retry_batch``: a batch's failed (or aborted) runs retried in one call.

In two steps, as on a Redis Cluster the two runs may live in different slots: the original is read
on its partition (run hash, tools hash, events, item in its batch; from the archive once it was
archived: producer.original), then the new run is submitted
on its own through the normal submission path (prepare, place, admit, send) with the extra
"initial checkpoint" payload (shared.origin) and the records (submit_restored.lua). A retry of a
batch's run takes its place in the batch (batch_replace.lua, before the retry is sent): the batch's
counts and results show the retry instead of it; its run listing shows both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from agentmill_client import limits
from agentmill_client.models import EventKind, Message, RunStatus
from producer.listing import Catalog, RunFilter
from producer.original import REBUILT_FROM, Original, archived_original, take_place, trimmed
from producer.placement import verdict
from producer.prepared import checked_messages
from producer.submission import SubmissionError, Submitted, outcome
from shared import checkpoint as checkpoints
from shared import payload_crypto
from shared.calls.submission import SubmitRestored
from shared.fields import RunField
from shared.off_loop import large, off_loop
from shared.origin import Origin
from shared.quotas import Quota
from shared.replies import text
from shared.script_sending import run_script, run_staged
from shared.tool_records import ToolRecord

if TYPE_CHECKING:
    from producer.service import Producer

__all__ = ["Original", "Restorer", "StateOf"]

# The state an origin names, as its checkpoint's JSON (None: a run that never started): the pure
# machine rebuilds it from the origin's checkpoint and events (worker.machine.origin_state), given
# by the process root that makes the Restorer (app.forks). Its arguments: the origin, the forked
# run's key, its input messages and the time now (ms).
StateOf = Callable[[Origin, str, list[Message], int], dict[str, Any] | None]

F = RunField
_FIELDS = [F.STATUS, F.TENANT, F.INPUT, F.CKPT, F.LAST_SEQ, F.BATCH, F.CLIENT_ID, F.ORIGIN, F.ARCHIVED,
           F.CONFIG]  # fmt: skip
RETRYABLE = (RunStatus.FAILED, RunStatus.ABORTED)
BATCH_PARALLEL = 16  # a batch's runs retried at a time (each: two reads, then the sends)
# What a new run does not inherit from its original's input: its ids (a new run gets its own) and its
# session (a retry or fork joins no session: the history it had loaded is in the checkpoint).
_NOT_INHERITED = ("runId", "sessionId", "autoCreateSession", "multitaskStrategy")


class Restorer:
    def __init__(self, producer: Producer, state_of: StateOf) -> None:
        self.p = producer
        self.state_of = state_of

    async def read(self, run_id: str, tenant: str, *, upto: int | None = None) -> Original:
        """The tenant's run ``run_id`` (404 for another tenant's), with its events up to ``upto``:
        from Redis, or from the archive once archiving dropped its input and checkpoint from its hash
        (or Redis forgot it: producer.original)."""
        key = await self.p.resolve(run_id, tenant)
        part = await self.p.locate(key)
        h: dict[str, str] = {}
        if part is not None:

            def read(pipe: Any) -> None:
                pipe.hmget(part.run(key), _FIELDS)
                pipe.hgetall(part.tools(key))
                if upto:
                    pipe.xrange(part.events(key), min="1-0", max=f"{upto}-0")
                pipe.get(part.transcript(key))  # when checkpoints leave it out (shared.checkpoint)

            got = (await self.p.parts.pipelined([(part, read)]))[0]
            h = dict(zip(_FIELDS, (text(v) if v is not None else "" for v in got[0]), strict=True))
        if part is None or not h[F.STATUS] or h[F.TENANT] != tenant:
            h = {}
        if not h or h[F.ARCHIVED] == "1":
            return await archived_original(self.p, run_id, tenant, part, h, upto or 0)
        assert part is not None
        item = None
        if h[F.BATCH]:
            ix = part.index_key(tenant, "item", h[F.BATCH])
            score = await self.p.parts.call(part, lambda c: c.zscore(ix, key))
            item = int(score) if score is not None else None
        entries = got[2] if upto else []
        if entries and text(entries[0][0]) != "1-0":  # the stream's MAXLEN trimmed its first events
            raise trimmed(run_id, text(entries[0][0]))
        return await off_loop(_decoded, key, run_id, part, h, item, entries, got[1], got[-1])

    async def retry(
        self,
        run_id: str,
        tenant: str,
        *,
        from_start: bool = False,
        quota: Quota | None = None,
        idempotency_key: str | None = None,
        actor: dict[str, str] | None = None,
    ) -> Submitted:
        """A failed or aborted run again (409 ``not_retryable`` for another status). The same
        ``idempotency_key`` for the same run names the same retry (created once)."""
        o = await self.read(run_id, tenant)
        if o.status not in RETRYABLE:
            raise SubmissionError(
                "not_retryable", f"run {run_id} is {o.status.value}: only a failed or aborted run is retried",
                status=409,
            )  # fmt: skip
        lineage: dict[str, Any] = {
            "retryOf": run_id,
            **({"from": "start"} if from_start else {}),
            **_by(actor),
        }
        origin = None if from_start else Origin(lineage, checkpoint=o.checkpoint)
        records = {} if from_start else {i: r for i, r in o.records.items() if r.done}
        key = f"retry\0{run_id}\0{idempotency_key}" if idempotency_key else ""
        return await self._send(o, tenant, lineage, origin, records, quota, in_batch=True, key=key)

    async def fork(
        self,
        run_id: str,
        tenant: str,
        at_seq: int,
        input_messages: list[Message] | None = None,
        *,
        quota: Quota | None = None,
        idempotency_key: str | None = None,
        agent: str | None = None,
        actor: dict[str, str] | None = None,
    ) -> Submitted:
        """A new run from the state at event ``at_seq`` of a run that ended (409 ``not_finished``
        before; 422 for a seq it does not have, or messages inside a tool round). The same
        ``idempotency_key``, run and body name the same fork (created once). ``agent``: another
        agent for it (else the run's own, at the run's version)."""
        o = await self.read(run_id, tenant, upto=at_seq)
        lineage, origin, records, key = await off_loop(
            _forked, o, self.state_of, at_seq, input_messages, idempotency_key, agent, actor
        )
        return await self._send(
            o, tenant, lineage, origin, records, quota, in_batch=False, key=key, agent=agent
        )

    async def retry_batch(
        self,
        batch_id: str,
        tenant: str,
        statuses: tuple[str, ...],
        *,
        quota: Quota | None = None,
        actor: dict[str, str] | None = None,
    ) -> list[tuple[str, Submitted | SubmissionError]]:
        """Each run of the batch in ``statuses`` (failed, aborted) retried from its checkpoint, in
        the batch's place: (its id, its retry or why not). A run a retry replaced already is skipped."""
        catalog = Catalog(self.p)
        rows: list[tuple[str, str]] = []  # (its key, its client's id)
        for status in statuses:
            cursor: str | None = None
            while True:
                page, cursor = await catalog._rows(  # and its archived runs
                    tenant, RunFilter(batch_id=batch_id, status=status), 500, cursor, {}
                )
                rows += [(r.run_id, r.client_id or r.run_id) for _, r in page]
                if cursor is None:
                    break
        gate = asyncio.Semaphore(BATCH_PARALLEL)

        async def one(shown: str) -> Submitted | SubmissionError | None:
            async with gate:
                try:
                    o = await self.read(shown, tenant)
                    if o.batch != batch_id:
                        return None  # a retry took its place already
                    lineage = {"retryOf": shown, **_by(actor)}
                    records = {i: r for i, r in o.records.items() if r.done}
                    origin = Origin(lineage, checkpoint=o.checkpoint)
                    return await self._send(o, tenant, lineage, origin, records, quota, in_batch=True)
                except SubmissionError as exc:
                    return exc

        shown = [s for _, s in rows]
        done = await asyncio.gather(*(one(s) for s in shown))
        return [(s, got) for s, got in zip(shown, done, strict=True) if got is not None]

    async def _send(
        self,
        o: Original,
        tenant: str,
        lineage: dict[str, Any],
        origin: Origin | None,
        records: dict[str, ToolRecord],
        quota: Quota | None,
        *,
        in_batch: bool,
        key: str = "",
        agent: str | None = None,
    ) -> Submitted:
        """The new run through the submission steps; ``key``: what its id is derived from (a
        client's Idempotency-Key with the route and the original), so it is created once."""
        sub = self.p.submitter
        raw = {k: v for k, v in o.input.items() if k not in _NOT_INHERITED}
        if agent is not None:  # a fork naming another agent: pinned anew
            raw = {**{k: v for k, v in raw.items() if k != "agentVersion"}, "agent": agent}
        default_id = await sub.key_run_id(tenant, key) if key else ""
        choices = await sub.choices(tenant, [raw])
        prep = await off_loop(sub.prepare, raw, tenant, default_id, quota, choices=choices)
        seed, flat = await off_loop(_sealed, origin, records)  # stored as the worker's writes are
        _check_restored(lineage, len(prep.body), len(seed), sum(len(x) for x in flat))
        part = sub.place(prep.run_id, prep.home)
        chosen = [(prep.run_id, part)] if key and sub.layout.count > 1 else []
        holders = await sub.admit(tenant, {part.index: [prep.run_id]}, quota, chosen)
        if holders and holders[0] is not None:  # created before (the same key, on another partition)
            return outcome(prep.run, verdict(holders[0], tenant, prep.digest))
        batch, item = (o.batch, o.item) if in_batch and o.batch else ("", None)
        # the retry takes the original's place in its batch first: one retry per place
        if batch and not await take_place(self.p, o, prep.run.run_id or prep.run_id):
            batch, item = "", None
        prep = await sub.started(prep, tenant)
        run, token = prep.submission(tenant, batch, item), ""
        sent: bytes | str = seed
        staged: dict[str, Any] = {}
        if large(run.input, seed):  # its input and origin staged by plain commands (submit_restored.lua)
            token = secrets.token_hex(8)
            staged = {F.INPUT: run.input, **({F.ORIGIN: seed} if seed else {})}
            run, sent = dataclasses.replace(run, input=""), ""
        call = SubmitRestored(orjson.dumps(lineage), sent, tuple(flat), run, token)
        k, a = self.p.scripts.framing.frame(part, call.keys(part), call.argv())
        script = self.p.scripts.submit_restored
        if token:
            at = (part.staged(run.run_id, token), staged)
            return outcome(prep.run, await run_staged(self.p.parts, script, part, at, k, a))
        return outcome(prep.run, await run_script(self.p.parts, script, part, k, a))


def _decoded(
    key: str, shown: str, part: Any, h: dict[str, str], item: int | None, entries: list[Any],
    tools: dict[Any, Any], transcript: Any,
) -> Original:  # fmt: skip
    """The run ``read`` fetched, its payloads opened and parsed (up to a megabyte of input, its
    checkpoint and transcript, and each event): the costly part of a read, run off the loop."""
    events: list[tuple[int, str, dict[str, Any]]] = []
    for _, f in entries:
        d = {text(k): v for k, v in f.items()}
        if text(d["kind"]) in REBUILT_FROM:
            events.append((int(text(d["seq"])), text(d["kind"]), payload_crypto.loads(d["payload"])))
    return Original(
        key=key, shown=shown, part=part, status=RunStatus(h[F.STATUS]), input=payload_crypto.loads(h[F.INPUT]),
        checkpoint=checkpoints.load(h[F.CKPT], h[F.CONFIG], transcript), last_seq=int(h[F.LAST_SEQ] or 0),
        batch=h[F.BATCH], item=item, events=events, origin=payload_crypto.loads(h[F.ORIGIN]) if h[F.ORIGIN] else None,
        records={text(k): ToolRecord.from_json(payload_crypto.open_bytes(v)) for k, v in tools.items()},
    )  # fmt: skip


def _forked(
    o: Original, state_of: StateOf, at_seq: int, input_messages: list[Message] | None,
    idempotency_key: str | None, agent: str | None, actor: dict[str, str] | None,
) -> tuple[dict[str, Any], Origin, dict[str, ToolRecord], str]:  # fmt: skip
    """What a fork of ``o`` at ``at_seq`` stores, checked (``Restorer.fork``): its lineage, its origin
    (the state rebuilt at the seq), the tool records it copies and the key its id derives from. Pure
    and costly for a large transcript: run off the loop."""
    if not o.status.terminal:
        raise SubmissionError(
            "not_finished", f"run {o.shown} is {o.status.value}: only a run that ended is forked", status=409
        )
    if not 0 <= at_seq <= o.last_seq:
        raise SubmissionError(
            "invalid_input", f"atSeq: run {o.shown} has events 1..{o.last_seq}", field="atSeq"
        )
    open_calls = _open_calls(o.events)
    if input_messages and open_calls:
        raise SubmissionError(
            "invalid_input",
            f"atSeq: seq {at_seq} is inside a tool round (calls {', '.join(open_calls)} have no result "
            "by then): inputMessages need a seq outside a round",
            field="atSeq",
        )
    lineage = {"forkOf": o.shown, "atSeq": at_seq, **_by(actor)}
    shown = _appended(input_messages or [])
    origin = Origin(lineage, _state_at(o, lineage, at_seq, state_of), append=shown)
    published = {str(p.get("toolCallId")) for _, k, p in o.events if k == EventKind.TOOL_RESULT}
    published |= _inherited(o.origin)
    records = {i: r for i, r in o.records.items() if r.done and i in published}
    body = orjson.dumps([at_seq, shown, agent]).decode()  # the same key with another body: another fork
    key = f"fork\0{o.shown}\0{body}\0{idempotency_key}" if idempotency_key else ""
    return lineage, origin, records, key


def _sealed(origin: Origin | None, records: dict[str, ToolRecord]) -> tuple[bytes, list[Any]]:
    """The origin and the records a retry or fork stores, sealed (shared.payload_crypto)."""
    seal = payload_crypto.active().seal_json
    flat: list[Any] = []
    for i, r in records.items():
        flat += [i, seal(r.to_json())]
    return (seal(origin.to_json()) if origin is not None else b""), flat


def _appended(messages: list[Message]) -> list[dict[str, Any]]:
    """A fork's inputMessages as its origin keeps them, within a submission's inputMessages bounds
    (count, size, images): else SubmissionError naming the bound."""
    if len(messages) > limits.MAX_INPUT_MESSAGES:
        raise SubmissionError("invalid_input", f"inputMessages: {len(messages)} messages; at most "
                              f"{limits.MAX_INPUT_MESSAGES}", field="inputMessages")  # fmt: skip
    checked_messages(messages)
    shown = [orjson.loads(m.model_dump_json(by_alias=True, exclude_none=True)) for m in messages]
    size = len(orjson.dumps(shown))
    if size > limits.MAX_RUN_INPUT_BYTES:
        raise SubmissionError("too_large", f"inputMessages are {size} bytes; at most {limits.MAX_RUN_INPUT_BYTES}",
                              status=413, field="inputMessages")  # fmt: skip
    return shown


def _by(actor: dict[str, str] | None) -> dict[str, Any]:
    """Who made the retry or fork (shared.actors): its lineage names it, and so its first status event."""
    return {"actor": actor} if actor else {}


def _state_at(o: Original, lineage: dict[str, Any], at_seq: int, state_of: StateOf) -> dict[str, Any] | None:
    """The checkpoint a fork of ``o`` at ``at_seq`` starts from: the state rebuilt from ``o``'s
    events up to it (worker.machine.origin), once, here. The fork stores that state alone (its
    transcript up to the seq), never ``o``'s last checkpoint, events and own origin beside it: a fork
    of a fork of a fork stores no more than its state, and reads nothing of its source again."""
    messages = [Message.model_validate(m) for m in o.input.get("inputMessages") or []]
    events = [(k, p) for _, k, p in o.events]
    try:
        state = state_of(Origin(lineage, o.checkpoint, events, parent=o.origin), o.key, messages,
                         int(time.time() * 1000))  # fmt: skip
    except Exception as exc:  # an origin of an older form it cannot read: refused, never a 500
        if o.input.get("storeContent") is False:  # its events hold no content to rebuild from
            raise SubmissionError("restore_failed", f"run {o.shown} kept no content (storeContent: false): its "
                                  f"state at seq {at_seq} cannot be rebuilt", status=409) from None  # fmt: skip
        raise SubmissionError("restore_failed", f"run {o.shown}'s state at seq {at_seq} cannot be rebuilt: "
                              f"{type(exc).__name__}: {str(exc)[:300]}", status=409) from None  # fmt: skip
    return None if state is None else {"seq": at_seq, "state": state}


def _check_restored(lineage: dict[str, Any], input_bytes: int, state_bytes: int, records_bytes: int) -> None:
    """What a retry or fork stores to start from within MAX_RESTORED_BYTES: else 413 naming it."""
    size = state_bytes + records_bytes
    if size > limits.MAX_RESTORED_BYTES:
        what = "fork" if "forkOf" in lineage else "retry"
        raise SubmissionError(
            "too_large",
            f"the {what} would store {size} bytes to start from (its state {state_bytes}, the tool records it "
            f"copies {records_bytes}; its input {input_bytes} besides); at most {limits.MAX_RESTORED_BYTES}",
            status=413,
        )


def _open_calls(events: list[tuple[int, str, dict[str, Any]]]) -> list[str]:
    """The tool calls published without a result by the last of ``events``."""
    open_: dict[str, None] = {}
    for _, kind, p in events:
        if kind == EventKind.TOOL_CALL:
            open_[str(p.get("toolCallId"))] = None
        elif kind == EventKind.TOOL_RESULT:
            open_.pop(str(p.get("toolCallId")), None)
    return list(open_)


def _inherited(origin: dict[str, Any] | None) -> set[str]:
    """The tool calls a restored run had results of before its first event (its origin's): their
    records were copied to it, and a fork of it at any seq has them too."""
    if not origin:
        return set()
    if origin.get("events") is None:  # a retry, or a fork's state: its transcript and open round
        state = (origin.get("checkpoint") or {}).get("state") or {}
        ids = {str(m.get("toolCallId")) for m in state.get("transcript") or [] if m.get("role") == "tool"}
        return ids | set(state.get("results") or {})
    ids = {str(p.get("toolCallId")) for k, p in origin["events"] if k == EventKind.TOOL_RESULT}
    return ids | _inherited(origin.get("parent"))
