"""A checkpoint leaves out the state's fields at their defaults and every None (worker/runner/commits.py
``Commits._dump``, ``machine.at_defaults``): loading puts them back, so every state a run goes through
reads back as the very state, in either storage of its transcript and configuration; and checkpoints
written whole, as before, still load (runs in flight through a deploy, archived runs)."""

from __future__ import annotations

import types
import typing
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agentmill_client.models import Message, RunInput
from shared import checkpoint
from tests.unit.machine_driver import T0, Driver, calls_reply, config, go
from tests.unit.test_machine_properties import OUTCOMES, TOOL_OUTCOMES
from worker import machine as m
from worker.adapters.memory_store import MemoryRun, MemoryRunStore, MemorySessionStore
from worker.adapters.plain import SystemClock
from worker.runner.commits import Commits, config_json
from worker.telemetry.observer import NullObserver


def commits(*, apart: bool) -> Commits:
    run = MemoryRun.submitted(
        "r1", RunInput.model_validate({"agent": "p", "inputMessages": [{"role": "user", "content": "x"}]})
    )
    store = MemoryRunStore(run, MemorySessionStore())
    return Commits(store, SystemClock(), NullObserver(), config_apart=apart, transcript_apart=apart)


def loaded(c: Commits, s: m.RunState) -> m.RunState:
    """``s`` through its checkpoint and back, as a reader gets it (shared.checkpoint)."""
    raw = b'{"seq":3,"state":%b}' % c._dump(s)
    cfg = config_json(s.config) if c.config_apart and s.config is not None else None
    tr = b",".join(c._message_json(x) for x in s.transcript) if c.transcript_apart else None
    ck = checkpoint.load(raw, cfg, tr)
    assert ck is not None and ck["seq"] == 3
    return m.RunState.model_validate(ck["state"])


BLANK = m.initial_state("r1").model_dump(mode="json", by_alias=True)


class Recording(Driver):
    """The machine driven through a random run, every state it passes recorded."""

    def __init__(self, model: list[str], tools: list[str]) -> None:
        super().__init__(model, tools)
        self.states: list[m.RunState] = []

    def answer(self, s: m.RunState, cmd: m.Command) -> list[m.Event]:
        if not self.states or self.states[-1] is not s:
            self.states.append(s)
        return super().answer(s, cmd)


@settings(max_examples=60, deadline=None)
@given(st.lists(OUTCOMES, max_size=12), st.lists(TOOL_OUTCOMES, max_size=20), st.booleans())
def test_every_state_of_a_random_run_reads_back_from_its_checkpoint(
    model: list[str], tools: list[str], apart: bool
) -> None:
    d = Recording([*model, "json"], tools)
    end = d.run(m.initial_state("r1").model_copy(update={"config": config(max_iterations=4)}), 2000)
    c = commits(apart=apart)
    for s in [m.initial_state("r1"), *d.states, end]:
        assert loaded(c, s) == s, s.node
        body = orjson.loads(c._dump(s))
        body.pop("config", None)  # spliced in whole (inline: its own nulls kept)
        if apart:
            assert body.pop("transcript") is None  # the marker: kept apart
        assert all(v != BLANK[k] for k, v in body.items() if k != "runId"), body  # no default
        assert b":null" not in orjson.dumps(body)  # no None, in the state or the models in it


def test_the_usual_step_checkpoint_is_about_half_as_long() -> None:
    s, _ = go(m.initial_state("r1"), m.Started(T0, config(), [Message(role="user", content="hi")]))
    s, _ = go(s, m.ContextLoaded(T0, []))
    s, _ = go(s, calls_reply(("c1", "echo", '{"text":"x"}')))
    c = commits(apart=True)
    whole = m.RunState.__pydantic_serializer__.to_json(s, by_alias=True, exclude={"config", "transcript"})
    assert loaded(c, s) == s and len(c._dump(s)) < 0.6 * len(whole)
    assert b'"transcript":null' in c._dump(s) and b'"config"' not in c._dump(s)  # kept apart: marked


def test_checkpoints_written_whole_still_load() -> None:
    """As releases before wrote them: every field, nulls and defaults included; inline or apart
    (a null transcript and config: the transcript's key and the run hash's config field hold them)."""
    s, _ = go(m.initial_state("r1"), m.Started(T0, config(), [Message(role="user", content="hi")]))
    s, _ = go(s, m.ContextLoaded(T0, []))
    s, _ = go(s, calls_reply(("c1", "echo", '{"text":"x"}')))
    whole = s.model_dump(mode="json", by_alias=True)
    ck = checkpoint.load(orjson.dumps({"seq": 4, "state": whole}))
    assert ck is not None and m.RunState.model_validate(ck["state"]) == s
    apart = {**whole, "transcript": None, "config": None}
    assert b'"toolCallId":null' in orjson.dumps(whole["transcript"])  # messages with their nulls
    tr = b",".join(orjson.dumps(x) for x in whole["transcript"])
    ck = checkpoint.load(orjson.dumps({"seq": 4, "state": apart}), orjson.dumps(whole["config"]), tr)
    assert ck is not None and m.RunState.model_validate(ck["state"]) == s


def _models(t: Any, seen: set[type[BaseModel]]) -> None:
    if isinstance(t, type) and issubclass(t, BaseModel):
        if t not in seen:
            seen.add(t)
            for f in t.model_fields.values():
                _models(f.annotation, seen)
        return
    for a in typing.get_args(t):
        _models(a, seen)


def _nullable(t: Any) -> bool:
    if t is Any or t is None or t is types.NoneType:
        return True
    return (
        any(_nullable(a) for a in typing.get_args(t))
        if typing.get_origin(t) in (typing.Union, types.UnionType)
        else False
    )


def test_every_field_that_may_be_none_in_a_checkpoint_defaults_to_none() -> None:
    """exclude_none leaves a None out wherever it is (the state, a message, a tool call): loading
    gives it back only if the field's default is None."""
    seen: set[type[BaseModel]] = set()
    for name, f in m.RunState.model_fields.items():
        if name != "config":  # spliced in whole (worker.runner.commits.config_json)
            _models(f.annotation, seen)
    assert Message in seen and m.RunState not in seen
    for model in {*seen, m.RunState}:
        for name, f in model.model_fields.items():
            if _nullable(f.annotation):
                assert not f.is_required() and f.default is None, f"{model.__name__}.{name}"
