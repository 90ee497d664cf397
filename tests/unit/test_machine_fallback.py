"""Fallback chains in the pure machine: when a failed call moves on to the next provider, where to,
what it announces, what it reserves, and that a resumed call stays where it was."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentmill_client.models import Budget, EventKind, Message, ToolCall, Usage
from agentmill_client.statuses import RunStatus
from shared.profiles import AgentProfile, Pricing
from shared.provider_config import FALLBACK_CLASSES, ProviderConfig
from tests.unit.machine_driver import T0, Driver, calling, config, failure, go, result, text_reply
from worker import machine as m
from worker.core.config import ChainLink, chain_of
from worker.core.policy import ModelFailure
from worker.machine import fallback

CHEAP, DEAR = Pricing(input_per_m_tok=1, output_per_m_tok=2), Pricing(input_per_m_tok=10, output_per_m_tok=20)


def chained(*, fallback_on: list[str] | None = None, windows: tuple[int | None, ...] = (None, None, None),
            **kw: Any) -> m.RunState:  # fmt: skip
    links = [
        ChainLink(name="primary", model="big-1", context_window=windows[0], pricing=CHEAP),
        ChainLink(
            name="backup", model="other-2", context_window=windows[1], pricing=DEAR, reserve_output_tokens=100
        ),
        ChainLink(name="last", model="third-3", context_window=windows[2]),
    ]
    cfg = config(chain=links, fallback_on=list(FALLBACK_CLASSES if fallback_on is None else fallback_on),
                 pricing=CHEAP, **kw)  # fmt: skip
    return calling(cfg)


def calls_of(cmds: list[m.Command]) -> list[m.ModelRequest]:
    return [c.request for c in cmds if isinstance(c, m.CallModel)]


def fallbacks(cmds: list[m.Command]) -> list[dict[str, Any]]:
    return [c.payload for c in cmds if isinstance(c, m.Emit) and c.payload.get("status") == "model_fallback"]


def test_the_table_names_every_class_a_profile_may_list() -> None:
    assert set(fallback.RULES) == set(FALLBACK_CLASSES)
    assert set(fallback.RULES.values()) <= {fallback.NOW, fallback.SPENT}


@pytest.mark.parametrize(
    ("kind", "status", "cls"),
    [
        ("http", 529, "overloaded"),
        ("http", 503, "overloaded"),
        ("http", 429, "rate_limited"),
        ("http", 500, "server_error"),
        ("http", 502, "server_error"),
        ("connection", None, "server_error"),
        ("timeout", None, "timeout"),
        ("overflow", 400, "context_too_long"),
        ("http", 400, None),
        ("invalid", 500, None),
        ("stream", None, None),
        ("truncated", None, None),
    ],
)
def test_failures_fall_into_the_classes_fallbackOn_names(
    kind: str, status: int | None, cls: str | None
) -> None:
    assert fallback.failure_class(ModelFailure(kind=kind, message="x", status=status)) == cls  # type: ignore[arg-type]


def test_an_overloaded_primary_moves_the_call_to_the_fallback_at_once() -> None:
    s = chained()
    s, cmds = go(s, failure(status=529))
    assert s.node == m.CALLING and s.provider_index == 1 and s.attempt == 0
    assert fallbacks(cmds) == [
        {"status": "model_fallback", "modelCallIndex": 1, "reason": "overloaded", "model": "other-2",
         "from": "primary", "to": "backup"}
    ]  # fmt: skip
    (req,) = calls_of(cmds)
    assert req.provider_index == 1 and req.model_call_index == 1
    # the error event of the failed attempt still goes out first, retryable
    errors = [c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == EventKind.ERROR]
    assert errors[0]["code"] == "model_http_529"


def test_a_rate_limit_is_retried_on_its_provider_first_then_moves_on() -> None:
    s = chained()  # config(): retry.max_retries=2
    s, cmds = go(s, failure(status=429))
    assert s.node == m.RETRYING and s.provider_index == 0 and not fallbacks(cmds)
    s, _ = go(s, m.RetryTimerFired(T0), failure(status=429), m.RetryTimerFired(T0))
    assert s.attempt == 2 and s.provider_index == 0
    s, cmds = go(s, failure(status=429))
    assert s.provider_index == 1 and s.attempt == 0 and fallbacks(cmds)[0]["reason"] == "rate_limited"
    assert calls_of(cmds)[0].provider_index == 1


def test_the_chain_is_walked_to_its_end_then_the_call_retries_and_fails_as_without_one() -> None:
    s = chained()
    s, _ = go(s, failure(status=529), failure(status=529))
    assert s.provider_index == 2
    s, cmds = go(s, failure(status=529))  # the last provider: an ordinary retry
    assert s.node == m.RETRYING and s.provider_index == 2 and not fallbacks(cmds)
    s, _ = go(s, m.RetryTimerFired(T0), failure(status=529), m.RetryTimerFired(T0), failure(status=529))
    assert s.phase == RunStatus.FAILED and s.last_error is not None
    assert s.last_error.code == "model_retries_exhausted"


def test_a_class_fallbackOn_leaves_out_never_moves_the_call() -> None:
    s = chained(fallback_on=["rate_limited"])
    s, cmds = go(s, failure(status=529))
    assert s.node == m.RETRYING and s.provider_index == 0 and not fallbacks(cmds)


def test_a_bad_request_fails_without_trying_the_fallback() -> None:
    s, cmds = go(chained(), failure(status=400))
    assert s.phase == RunStatus.FAILED and not fallbacks(cmds) and not calls_of(cmds)


def test_a_profile_with_one_provider_behaves_as_before() -> None:
    s, cmds = go(calling(), failure(status=529))
    assert s.node == m.RETRYING and s.provider_index == 0 and not fallbacks(cmds)


def test_context_too_long_goes_only_to_a_provider_with_a_larger_declared_window() -> None:
    s = chained(windows=(8_000, 8_000, 128_000))
    s, cmds = go(s, failure(kind="overflow", status=400))
    assert s.provider_index == 2 and fallbacks(cmds)[0]["reason"] == "context_too_long"
    assert fallbacks(cmds)[0]["to"] == "last"


def test_context_too_long_without_a_larger_window_compacts_as_without_a_chain() -> None:
    for windows in [(8_000, 8_000, 4_000), (None, 128_000, None), (8_000, None, None)]:
        s, cmds = go(chained(windows=windows), failure(kind="overflow", status=400))
        assert s.phase == m.Phase.COMPACTING and s.provider_index == 0 and not fallbacks(cmds)


def test_the_call_that_moved_reserves_at_its_provider_s_prices() -> None:
    _, cmds = go(chained(), failure(status=529))
    (req,) = calls_of(cmds)
    first = calls_of(go(chained(), m.Resumed(T0))[1])[0]
    assert first.provider_index == 0
    out = 100  # the backup's maxTokens
    assert req.reserve_tokens == first.reserve_tokens - 4096 + out
    assert req.reserve_cost_usd == DEAR.cost_usd(req.reserve_tokens - out, out)
    assert first.reserve_cost_usd == CHEAP.cost_usd(first.reserve_tokens - 4096, 4096)


def test_a_fallback_the_run_budget_cannot_afford_ends_the_run_before_the_call() -> None:
    # the primary's worst case (~20 prompt tokens + 4096 at $1/$2) fits $0.01; at $10/$20 it does not
    links = [
        ChainLink(name="primary", model="a", pricing=CHEAP),
        ChainLink(name="backup", model="b", pricing=DEAR),
    ]
    s = calling(
        config(chain=links, fallback_on=["overloaded"], pricing=CHEAP, budget=Budget(max_cost_usd=0.01))
    )
    s, cmds = go(s, failure(status=529))
    assert s.phase == RunStatus.FAILED and s.last_error is not None
    assert s.last_error.code == "budget_exceeded" and not calls_of(cmds)
    assert fallbacks(cmds)  # the move is announced, then refused


def test_a_call_resumed_after_a_crash_stays_on_the_provider_it_had_moved_to() -> None:
    s, _ = go(chained(), failure(status=529), m.ModelStreamOpened(T0))
    assert s.node == m.STREAMING
    # the checkpoint as a new worker reads it
    again = m.RunState.model_validate_json(s.model_dump_json(by_alias=True))
    assert again.provider_index == 1
    again, cmds = go(again, m.Resumed(T0))
    assert [r.provider_index for r in calls_of(cmds)] == [1]


def test_each_new_call_starts_on_the_primary_and_usage_names_the_model_that_answered() -> None:
    s, _ = go(chained(), failure(status=529))
    s, cmds = go(s, m.ModelStreamOpened(T0), text_reply("the answer"))
    usage = [c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == EventKind.USAGE]
    assert usage[0]["provider"] == "backup" and usage[0]["model"] == "other-2"
    assert s.phase == RunStatus.COMPLETED
    # a run that goes on to a second call (a tool round): that one starts on the primary again
    s, _ = go(chained(), failure(status=529), m.ModelStreamOpened(T0))
    tcs = [ToolCall(id="c1", name="echo", arguments="{}")]
    s, _ = go(s, m.ModelReplied(T0, Message(role="assistant", content="", tool_calls=tcs),
                                Usage(input_tokens=1, output_tokens=1), "tool_calls"))  # fmt: skip
    assert s.phase == m.Phase.TOOL_RUNNING and s.provider_index == 1
    s, cmds = go(s, result("c1"))
    assert s.node == m.CALLING and s.provider_index == 0
    assert [r.provider_index for r in calls_of(cmds)] == [0]


def test_chain_of_a_profile() -> None:
    p = AgentProfile(
        name="a",
        providers=[
            ProviderConfig(kind="openai", base_url="http://a/v1", model="m1", context_window=8_000),
            ProviderConfig(kind="openai", base_url="http://b/v1", model="m2", name="spare", max_tokens=64),
        ],
    )
    assert p.provider.model == "m1" and p.provider_names() == ["0", "spare"]
    assert p.fallback_steps() == [("0", "spare")]
    links = chain_of(p)
    assert [(link.name, link.model, link.context_window, link.reserve_output_tokens) for link in links] == [
        ("0", "m1", 8_000, 4096),
        ("spare", "m2", None, 64),
    ]
    assert chain_of(AgentProfile(name="b")) == []


def test_a_profile_gives_provider_or_providers_with_names_of_their_own() -> None:
    one = {"kind": "openai", "baseUrl": "http://a/v1", "model": "m"}
    with pytest.raises(ValueError, match="provider and providers"):
        AgentProfile.model_validate({"name": "a", "provider": one | {"model": "n"}, "providers": [one, one]})
    with pytest.raises(ValueError, match="its own name"):
        AgentProfile.model_validate({"name": "a", "providers": [one | {"name": "x"}, one | {"name": "x"}]})
    with pytest.raises(ValueError, match=r"providers\.1: an openai provider needs baseUrl"):
        AgentProfile.model_validate({"name": "a", "providers": [one, {"kind": "openai", "model": "m"}]})
    with pytest.raises(ValueError, match="fallbackOn"):
        AgentProfile.model_validate({"name": "a", "providers": [one, one], "fallbackOn": ["sunspots"]})


def test_a_chained_profile_survives_its_own_dump() -> None:
    one = {"kind": "openai", "baseUrl": "http://a/v1", "model": "m"}
    p = AgentProfile.model_validate({"name": "a", "providers": [one, one | {"baseUrl": "http://b/v1"}]})
    again = AgentProfile.model_validate(p.model_dump(by_alias=True))
    assert again.chain == p.chain and again.provider == p.providers[0]  # type: ignore[index]


class Watching(Driver):
    """Checks, at every call the machine asks for, that it goes along the chain and never back."""

    def __init__(self, model: list[str], chain: int) -> None:
        super().__init__(model, [])
        self.chain = chain
        self.on: dict[int, int] = {}  # model call index -> the provider it was last asked on
        self.moves = 0

    def answer(self, s: m.RunState, cmd: m.Command) -> list[m.Event]:
        if isinstance(cmd, m.CallModel):
            r = cmd.request
            assert 0 <= r.provider_index < self.chain and r.provider_index == s.provider_index
            assert r.provider_index >= self.on.get(r.model_call_index, 0)  # never back to an earlier one
            self.on[r.model_call_index] = r.provider_index
        if isinstance(cmd, m.Emit) and cmd.payload.get("status") == "model_fallback":
            self.moves += 1
        return super().answer(s, cmd)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["text", "calls", "retry", "fatal", "overflow", "conn", "partial", "cut"]),
        max_size=40,
    ),
    st.integers(0, 3),
    st.lists(st.sampled_from(FALLBACK_CLASSES), unique=True),
)
def test_random_runs_walk_the_chain_forward_and_end(model: list[str], retries: int, on: list[str]) -> None:
    links = [
        ChainLink(name=n, model=n, context_window=w) for n, w in (("a", 1_000), ("b", 2_000), ("c", None))
    ]
    cfg = config(chain=links, fallback_on=on, max_iterations=4,
                 retry=config().retry.model_copy(update={"max_retries": retries}))  # fmt: skip
    d = Watching(model, len(links))
    s = d.run(m.initial_state("r1").model_copy(update={"config": cfg}), 5_000)
    assert s.terminal and d.finishes == 1
    assert d.moves <= (len(links) - 1) * len(d.on)  # at most two moves a call


def test_the_watching_driver_sees_moves() -> None:
    links = [ChainLink(name=n, model=n) for n in "abc"]
    d = Watching(["retry", "retry", "retry", "text"], len(links))
    s = d.run(
        m.initial_state("r1").model_copy(update={"config": config(chain=links, fallback_on=["overloaded"])}),
        100,
    )
    assert s.phase == RunStatus.COMPLETED and d.moves == 2 and d.on == {1: 2}
