"""A checkpoint's JSON (worker/runner/commits.py ``Commits._dump``): the state's own JSON, its config and
message lists spliced in, each message serialised once a run. Whatever the states a run goes
through, the checkpoint must read back as the very state."""

from __future__ import annotations

import orjson

from agentmill_client.models import Message, RunInput
from shared import checkpoint
from tests.unit.machine_driver import T0, calls_reply, config, go, result, text_reply
from worker import machine as m
from worker.adapters.memory_store import MemoryRun, MemoryRunStore, MemorySessionStore
from worker.adapters.plain import SystemClock
from worker.runner.commits import Commits
from worker.telemetry.observer import NullObserver


def commits() -> Commits:
    sessions = MemorySessionStore()
    run = RunInput.model_validate({"agent": "p", "inputMessages": [{"role": "user", "content": "x"}]})
    return Commits(MemoryRunStore(MemoryRun.submitted("r1", run), sessions), SystemClock(), NullObserver())


def same(c: Commits, state: m.RunState) -> None:
    dumped = c._dump(state)
    assert m.RunState.model_validate_json(dumped) == state
    own = orjson.loads(dumped)
    own.pop("config", None)  # (the configuration's JSON as config_json made it)
    assert b":null" not in orjson.dumps(own)  # nulls left out (tests/unit/test_checkpoint_compact.py)


def test_every_state_of_a_run_reads_back_from_its_checkpoint() -> None:
    c = commits()
    history = [Message(role="user", content="before"), Message(role="assistant", content="earlier answer")]
    s, _ = go(m.initial_state("r1"), m.Started(T0, config(), [Message(role="user", content="hi")]))
    same(c, s)
    s, _ = go(s, m.ContextLoaded(T0, history))
    same(c, s)
    for i in range(6):  # tool rounds: each state holds the last one's messages and new ones
        s, _ = go(s, calls_reply((f"c{i}", "echo", orjson.dumps({"text": str(i)}).decode())))
        same(c, s)
        s, _ = go(s, result(f"c{i}", f"out {i}"))
        same(c, s)
    assert len(c._messages) == len({id(x) for x in [*s.history, *s.transcript]})  # no more than it holds
    # The same messages as new objects (a restored or compacted state): serialised again, the same.
    again = s.model_copy(
        update={"transcript": [Message.model_validate(x.model_dump()) for x in s.transcript]}
    )
    same(c, again)
    # A shorter transcript (compaction): the messages it dropped leave the cache too.
    short = again.model_copy(update={"transcript": again.transcript[-2:]})
    same(c, short)
    assert len(c._messages) == len(short.history) + 2
    s, _ = go(s, text_reply("done"))
    same(c, s)
    same(c, m.initial_state("r2"))  # no config yet


def test_a_checkpoint_written_without_its_configuration_reads_back_with_the_runs() -> None:
    # AGENTMILL_CHECKPOINT_CONFIG=apart: the checkpoint's config is null, the run hash's config field
    # holds it (sent with an attempt's first commit); every reader loads it through shared.checkpoint.
    c = Commits(commits().store, SystemClock(), NullObserver(), config_apart=True)
    s, _ = go(m.initial_state("r1"), m.Started(T0, config(), [Message(role="user", content="hi")]))
    dumped = c._dump(s)
    assert "config" not in orjson.loads(dumped)
    wrapped = b'{"seq":3,"state":%b}' % dumped
    cfg = orjson.dumps(s.config.model_dump(mode="json", by_alias=True)) if s.config else b""
    loaded = checkpoint.load(wrapped, cfg)
    assert loaded is not None and m.RunState.model_validate(loaded["state"]) == s
    assert checkpoint.load(wrapped, None) == orjson.loads(wrapped)  # no field: as written
    inline = b'{"seq":3,"state":%b}' % commits()._dump(s)
    assert checkpoint.load(inline, b'{"other": 1}') == orjson.loads(inline)  # its own config wins
    assert checkpoint.load(b"", cfg) is None


async def test_a_transcript_kept_apart_is_appended_and_set_whole_only_when_replaced() -> None:
    # AGENTMILL_CHECKPOINT_TRANSCRIPT=apart: the checkpoint's transcript is null; the transcript's key
    # gets each commit's new messages (a leading comma but the first), or all of them when the
    # machine replaced the list (compaction) or on an attempt's first commit.
    from worker.core.commit_step import CommitStep, Outbox

    c = commits()
    c.transcript_apart = c.config_apart = True
    store = c.store
    assert isinstance(store, MemoryRunStore)
    await store.acquire(1, "w1")
    sent: list[tuple[bool, bytes] | None] = []
    real = store.commit

    async def spy(step: CommitStep) -> int:
        w = step.transcript
        sent.append(None if w is None else (w.append, w.data))
        return await real(step)

    store.commit = spy  # type: ignore[method-assign]

    def back() -> m.RunState:
        r = store.run
        loaded = checkpoint.load(r.checkpoint, r.config, r.transcript)
        assert loaded is not None and orjson.loads(r.checkpoint or b"")["state"]["transcript"] is None
        return m.RunState.model_validate(loaded["state"])

    s, _ = go(m.initial_state("r1"), m.Started(T0, config(), [Message(role="user", content="hi")]))
    await c.step(s, Outbox())
    assert back() == s and sent[-1] is not None and sent[-1][0] is False  # the first: set whole
    await c.step(s, Outbox())
    assert sent[-1] is None  # nothing new
    s, _ = go(s, m.ContextLoaded(T0, []))
    for i in range(3):
        s, _ = go(s, calls_reply((f"c{i}", "echo", "{}")))
        await c.step(s, Outbox())
        assert back() == s and sent[-1] is not None and sent[-1][0] is True
        assert sent[-1][1].startswith(b",") and sent[-1][1].count(b'"role"') == 1  # the reply alone
        s, _ = go(s, result(f"c{i}", f"out {i}"))
        await c.step(s, Outbox())
        assert back() == s and sent[-1] is not None and sent[-1][1].count(b'"role"') == 1
    # A message at the address of one the cache still holds (its id reused): serialised anew.
    fresh = Message(role="user", content="new")
    c._messages[id(fresh)] = (Message(role="user", content="stale"), b'{"role":"user","content":"stale"}')
    s = s.model_copy(update={"transcript": [*s.transcript, fresh]})
    await c.step(s, Outbox())
    assert back() == s
    short = s.model_copy(update={"transcript": s.transcript[-2:]})  # compaction replaced it
    await c.step(short, Outbox())
    assert back() == short and sent[-1] == (False, store.run.transcript)
    s, _ = go(short, text_reply("done"))
    await c.step(s, Outbox())
    assert back() == s and sent[-1] is not None and sent[-1][0] is True
