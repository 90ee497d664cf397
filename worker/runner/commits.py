"""A run's writes: the buffer of events published between the machine's steps (model deltas, retry
and restart notices), and the fenced commit of a step with its checkpoint. One commit at a time:
deltas come from the model task, steps from the loop.

A step may be held (``hold``) instead of committed: its events, claims and records then go out with
the next commit, under the later state's checkpoint. The driver holds only a step whose effects may
run again after a crash (tool calls declared ``sideEffects: false``), for a bounded time.

A step may also be sent behind (``send``): its commit goes out and the driver goes on without its
reply, which every later write awaits first (``landed``), so commits stay one at a time and in order;
a refused commit (fenced, a seq conflict) is raised to whoever awaits it next. The driver sends
behind only a step whose one effect is a model call (RunDriver.model_commit)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from agentmill_client.models import Message, Usage
from worker.adapters.plain import NoFailpoints
from worker.core.commit_step import (
    CommitStep,
    Entry,
    JobEnd,
    Outbox,
    SessionUpdate,
    Settlement,
    TranscriptWrite,
    UsageTally,
)
from worker.core.config import RunConfig
from worker.machine import Emit, RunState, at_defaults
from worker.machine.children import children_record
from worker.ports import Clock, Failpoints, RunStore
from worker.telemetry.observer import Observer

__all__ = ["Commits"]

NO_FAILPOINTS = NoFailpoints()
_SPLICED = {"config", "history", "transcript"}  # serialised apart and spliced into the state's JSON


def _field(name: str) -> bytes:
    return orjson.dumps(RunState.model_fields[name].alias or name)


_CONFIG_FIELD, _HISTORY_FIELD, _TRANSCRIPT_FIELD = _field("config"), _field("history"), _field("transcript")
_STATE_JSON = RunState.__pydantic_serializer__  # to JSON bytes in one call, no dict in between
_CONFIG_JSON = RunConfig.__pydantic_serializer__
_MESSAGE_JSON = Message.__pydantic_serializer__
# A run's messages by identity: each message's JSON, kept while the state holds the message. Messages
# are frozen and the machine builds new lists around the same objects, so a checkpoint serialises only
# the messages new since the last one (the whole transcript again each commit was most of a
# ten-step run's serialisation, and grew with every step).
_Messages = dict[int, tuple[Message, bytes]]
_SHARED_MAX = 256
# id -> a configuration and its JSON, least recently used first: the configurations runs share
# (worker/core/config_cache.py) stay, each run's own passes through (a run keeps its own in Commits).
_shared: OrderedDict[int, tuple[RunConfig, bytes]] = OrderedDict()


def config_json(config: RunConfig) -> bytes:
    """A configuration's JSON, serialised once per worker for the configurations runs share."""
    key = id(config)
    hit = _shared.get(key)
    if hit is not None and hit[0] is config:
        _shared.move_to_end(key)
        return hit[1]
    # An MCP tool is stored as its name and its listing's hash (worker/tools/mcp_listings.py): the
    # listing is kept once, not in every run; restore fills the schemas back.
    listed = {i: {"description", "parameters"} for i, t in enumerate(config.tools) if t.listing is not None}
    out: bytes = _CONFIG_JSON.to_json(config, by_alias=True, exclude={"tools": listed} if listed else None)
    _shared[key] = (config, out)
    _shared.move_to_end(key)
    if len(_shared) > _SHARED_MAX:
        _shared.popitem(last=False)
    return out


@dataclass(slots=True)
class _Held:
    """Steps held back: the last one's state, and what all of them would have written, in order."""

    state: RunState
    events: list[Entry] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)
    records: list[tuple[str, bytes]] = field(default_factory=list)
    settle: Settlement | None = None

    def add(self, state: RunState, events: list[Entry], outbox: Outbox) -> None:
        if self.settle is not None and outbox.settle is not None:  # pragma: no cover - the driver's rule
            raise ValueError("two budget settlements in one commit")
        self.state = state
        self.events += [*events, *outbox.events]
        self.claims += outbox.claims
        self.records += outbox.records
        self.settle = self.settle or outbox.settle

    def outbox(self) -> Outbox:
        """One commit's worth: a call's claim is left out when its record goes in the same commit."""
        recorded = {i for i, _ in self.records}
        claims = [c for c in self.claims if c not in recorded]
        return Outbox(self.events, claims, self.records, self.settle)


class Commits:
    def __init__(
        self,
        store: RunStore,
        clock: Clock,
        observer: Observer,
        *,
        failpoints: Failpoints = NO_FAILPOINTS,
        config_apart: bool = False,
        transcript_apart: bool = False,
    ) -> None:
        self.store = store
        # AGENTMILL_CHECKPOINT_CONFIG=apart: checkpoints leave the configuration out; it is sent with
        # the first commit of each attempt (RunField.CONFIG; restore puts it back)
        self.config_apart = config_apart
        self._config_sent: RunConfig | None = None
        # AGENTMILL_CHECKPOINT_TRANSCRIPT=apart: checkpoints leave the transcript out; each commit
        # appends the messages new since the last (set whole on an attempt's first commit and when the
        # machine replaced the list: compaction). _transcript_sent: the messages stored, by identity.
        self.transcript_apart = transcript_apart
        self._transcript_sent: list[Message] | None = None
        self.clock = clock
        self.observer = observer
        self.failpoints = failpoints
        self.lock = asyncio.Lock()
        self.buffer: list[Entry] = []  # published with the next commit
        self.ckpt_seq = 0  # the seq the last checkpoint was committed with
        self._config: RunConfig | None = None  # the run's configuration and its JSON, spliced into
        self._config_json = b"null"  # each checkpoint
        self._children = b"[]"  # the round's children as the run hash has them (RunField.CHILDREN)
        self._usage: Usage | None = None  # the usage the last commit wrote to the run hash
        self._iterations = -1  # the iterations it wrote (sent only when they changed)
        self._messages: _Messages = {}  # the messages of the last checkpoint and their JSON
        self._held: _Held | None = None  # steps whose writes wait for the next commit (hold)
        self.behind: asyncio.Task[None] | None = None  # a commit sent, its reply not yet awaited (send)
        self._sending: set[asyncio.Task[None]] = set()  # the tasks of commits sent behind, not done

    @property
    def holding(self) -> bool:
        return self._held is not None

    def hold(self, state: RunState, outbox: Outbox) -> None:
        """This step's writes (and the buffer's) join the next commit instead of going out now."""
        if self._held is None:
            self._held = _Held(state)
        self._held.add(state, self._take(), outbox)

    async def flush_held(self) -> None:
        """The held steps committed now, if any are still held."""
        if self._held is not None:
            await self.step(None, Outbox())

    def send(self, state: RunState, outbox: Outbox, on_reply: Callable[[], None]) -> None:
        """``step`` without waiting for its reply: the commit leaves first (its task starts before any
        task created after this call), ``on_reply`` is called when its reply (or refusal) is in."""
        task = asyncio.create_task(self._after(self.behind, state, outbox))
        self._sending.add(task)

        def replied(t: asyncio.Task[None]) -> None:
            self._sending.discard(t)
            if not t.cancelled():
                t.exception()  # retrieved: whoever awaits it next raises it
            on_reply()

        task.add_done_callback(replied)
        self.behind = task

    async def _after(self, prev: asyncio.Task[None] | None, state: RunState, outbox: Outbox) -> None:
        if prev is not None:  # one sent behind before it: its refusal is this one's too
            await asyncio.shield(prev)
        await self.step(state, outbox)

    async def landed(self) -> None:
        """The commit sent behind, if any, acknowledged; raises its refusal (every time it is asked)."""
        task = self.behind
        if task is None:
            return
        await asyncio.shield(task)  # a cancelled waiter leaves the commit to finish
        if self.behind is task:
            self.behind = None

    def refused(self) -> bool:
        """Whether the commit sent behind came back refused (or failed)."""
        t = self.behind
        return t is not None and t.done() and (t.cancelled() or t.exception() is not None)

    async def step(
        self,
        state: RunState | None,
        outbox: Outbox,
        *,
        status: str = "",
        aux: bytes = b"",
        session: SessionUpdate | None = None,
        approval_timeout_ms: int | None = None,
        run_deadline_ms: int | None = None,
        error_code: str = "",
        tally: UsageTally | None = None,
        job_end: JobEnd | None = None,
    ) -> None:
        """The held steps, the buffer, the step's events, its claims and records and the checkpoint:
        one fenced write. ``state`` None: the held steps' own (``flush_held``), if still held then."""
        # A commit sent behind waits for the one before it (``_after``), never for a later one: a
        # third sent while the second still commits would wait on it while it waits on the third.
        if self.behind is not None and asyncio.current_task() not in self._sending:
            await self.landed()
        async with self.lock:
            held, self._held = self._held, None
            if state is None:
                if held is None:  # committed by a step while this one waited for the lock
                    return
                state = held.state
            held = held or _Held(state)
            held.add(state, self._take(), outbox)
            merged = held.outbox()
            events = self._stamped(merged.events)
            last = self.store.last_seq + len(events)
            ckpt = b'{"seq":%d,"state":%b}' % (last, self._dump(state))
            kids = orjson.dumps(children_record(state))
            usage = state.usage if state.usage != self._usage else None  # with the usage event
            config = None
            if self.config_apart and state.config is not None and state.config is not self._config_sent:
                config = config_json(state.config)
            transcript = self._transcript_write(state.transcript) if self.transcript_apart else None
            await self.store.commit(
                CommitStep(
                    Outbox(events, merged.claims, merged.records, merged.settle),
                    checkpoint=ckpt,
                    status=status,
                    aux=aux,
                    session=session,
                    approval_timeout_ms=approval_timeout_ms,
                    run_deadline_ms=run_deadline_ms,
                    iterations=state.iterations if state.iterations != self._iterations else None,
                    error_code=error_code,
                    children=kids if kids != self._children else None,
                    usage=usage,
                    tally=tally,
                    config=config,
                    transcript=transcript,
                    job_end=job_end,
                )
            )
            if config is not None:
                self._config_sent = state.config
            if transcript is not None:
                self._transcript_sent = list(state.transcript)
            self.ckpt_seq = last
            self._children = kids
            self._usage = state.usage
            self._iterations = state.iterations
        for kind, _, _ in events:
            self.observer.event_published(kind)

    def _dump(self, state: RunState) -> bytes:
        """The state's JSON, its fields at their defaults or None left out (loading puts them back;
        they were half a checkpoint's bytes, and Redis's Lua hashes every byte it is sent). Its
        config, set at start and never changed (and shared by the runs of a profile that set no knob
        of their own), is serialised once and spliced in: it was two thirds of a checkpoint's
        serialisation. So are its message lists, a message serialised once (``_messages``)."""
        body: bytes = _STATE_JSON.to_json(
            state, by_alias=True, exclude=_SPLICED | at_defaults(state), exclude_none=True
        )
        seen: _Messages = {}
        history = self._messages_json(state.history, seen)
        parts = [body[:-1]]  # an object with at least runId: its closing brace after the spliced fields
        if state.history:
            parts += (b",", _HISTORY_FIELD, b":", history)
        if self.transcript_apart:  # the transcript's key holds it (commit.lua), restore puts it back
            for m in state.transcript:  # the cache keeps the messages the next append may need
                seen[id(m)] = (m, self._message_json(m))
            parts += (b",", _TRANSCRIPT_FIELD, b":null")  # null: kept apart (shared.checkpoint)
        elif state.transcript:
            parts += (b",", _TRANSCRIPT_FIELD, b":", self._messages_json(state.transcript, seen))
        self._messages = seen  # only what this state holds: the cache never outgrows the checkpoint
        # apart (or none yet): left out; the run hash holds it (RunField.CONFIG), restore puts it back
        if state.config is not None and not self.config_apart:
            if state.config is not self._config:
                self._config, self._config_json = state.config, config_json(state.config)
            parts += (b",", _CONFIG_FIELD, b":", self._config_json)
        parts.append(b"}")
        return b"".join(parts)

    def _transcript_write(self, messages: list[Message]) -> TranscriptWrite | None:
        """What the transcript's key needs to hold ``messages``: the new ones appended when the list
        extends what it holds (the same message objects), else the whole set; None: unchanged."""
        sent = self._transcript_sent
        if (
            sent is not None
            and len(messages) >= len(sent)
            and all(a is b for a, b in zip(sent, messages[: len(sent)], strict=True))
        ):
            new = messages[len(sent) :]
            if not new:
                return None
            data = b",".join(self._message_json(m) for m in new)
            return TranscriptWrite(True, b"," + data if sent else data)
        return TranscriptWrite(False, b",".join(self._message_json(m) for m in messages))

    def _message_json(self, m: Message) -> bytes:
        hit = self._messages.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        out: bytes = _MESSAGE_JSON.to_json(m, by_alias=True, exclude_none=True)
        return out

    def _messages_json(self, messages: list[Message], seen: _Messages) -> bytes:
        """A message list's JSON array, each message's JSON from the last checkpoint's when it holds
        that very message."""
        cache, parts = self._messages, []
        for m in messages:
            key = id(m)
            hit = cache.get(key) or seen.get(key)
            if hit is None or hit[0] is not m:
                hit = (m, _MESSAGE_JSON.to_json(m, by_alias=True, exclude_none=True))
            seen[key] = hit
            parts.append(hit[1])
        return b"[%b]" % b",".join(parts)

    async def publish_now(self) -> None:
        """The buffer alone (deltas while a model streams), without a checkpoint; after the held
        steps, with them, if any are held."""
        if self._held is not None:
            await self.flush_held()
            return
        await self.landed()
        async with self.lock:
            events = self._stamped(self._take())
            if not events:
                return
            await self.store.publish(events)
        self.failpoints.hit("after_delta_publish")
        for kind, _, _ in events:
            self.observer.event_published(kind)

    def emit(self, *events: Emit) -> None:
        """Events built between checkpoints (worker/machine/notices.py): out with the next commit."""
        now = self.clock.now_ms()
        self.buffer.extend((e.kind._value_, now, orjson.dumps(e.payload)) for e in events)

    def extend_last(self, kind: str, field: str, text: str, max_chars: int) -> bool:
        """Coalesce: ``text`` appended to ``field`` of the last buffered event when that is a
        ``kind`` event with the field under ``max_chars`` long; False (nothing changed) if not."""
        if not self.buffer or self.buffer[-1][0] != kind:
            return False
        _, ts, raw = self.buffer[-1]
        last = orjson.loads(raw)
        if field not in last or len(last[field]) >= max_chars:
            return False
        last[field] += text
        self.buffer[-1] = (kind, ts, orjson.dumps(last))
        return True

    def holds(self, kind: str) -> bool:
        """Whether an event of ``kind`` waits in the buffer."""
        return any(k == kind for k, _, _ in self.buffer)

    def drop(self, kind: str) -> None:
        """The buffered events of ``kind`` dropped unpublished."""
        self.buffer = [e for e in self.buffer if e[0] != kind]

    def _stamped(self, events: list[Entry]) -> list[Entry]:
        """An event's ts is when it is published (coalesced deltas were buffered earlier)."""
        ts = self.clock.now_ms()
        return [(kind, ts, payload) for kind, _, payload in events]

    def _take(self) -> list[Entry]:
        out, self.buffer = self.buffer, []
        return out
