"""Fallback chains: when a failed model call moves on to the next provider of its profile's chain.

``RULES`` is the table: the class of a failure (``failure_class``) and when it moves the call on:
at once (``NOW``), or once the call's retries on its provider are spent (``SPENT``). A class the
profile's ``fallbackOn`` leaves out, or a failure of no class (a bad request, a cut-off stream),
never moves it: the call retries, compacts or fails as it would with one provider. The provider a
call is on is ``RunState.provider_index``, checkpointed with the call, so a call resumed after a
crash continues where it was (the primary is not asked again for it); each new call starts on the
primary. Pure, like the rest of the machine.
"""

from __future__ import annotations

from typing import Final

from agentmill_client.models import RunStatus
from worker.core.config import RunConfig
from worker.core.policy import ModelFailure
from worker.machine.budget import spent_with_children, unaffordable
from worker.machine.commands import CallModel, Command, Decision
from worker.machine.state import CallPhase, RunState
from worker.machine.steps import build_messages_for_call, finish, over_time, request_of, status_event, up

__all__ = ["NOW", "RULES", "SPENT", "failure_class", "link_name", "move_on", "next_provider"]

NOW: Final = "now"
SPENT: Final = "spent"

# fmt: off
RULES: dict[str, str] = {
    "overloaded": NOW,          # 529, 503: the provider cannot take calls now; retrying it adds to its load
    "rate_limited": SPENT,      # 429: its retries wait out the limit first (their backoff honours Retry-After)
    "server_error": SPENT,      # any other 5xx, or the connection refused
    "timeout": SPENT,           # no answer within the provider's timeouts
    "context_too_long": NOW,    # only to a provider whose declared context window is larger
}
# fmt: on


def failure_class(f: ModelFailure) -> str | None:
    """The fallback class of a failed attempt, or None (it is the request's fault, or the stream's)."""
    if f.kind == "overflow":
        return "context_too_long"
    if f.kind == "timeout":
        return "timeout"
    if f.kind == "connection":
        return "server_error"
    if f.kind == "http" and f.status is not None:
        if f.status in (503, 529):
            return "overloaded"
        if f.status == 429:
            return "rate_limited"
        if f.status >= 500:
            return "server_error"
    return None


def next_provider(cfg: RunConfig, index: int, f: ModelFailure, attempt: int) -> tuple[int, str] | None:
    """(the provider the call moves to, the class that moves it), or None: it stays where it is."""
    chain = cfg.chain
    if len(chain) < 2:
        return None
    cls = failure_class(f)
    if cls is None or cls not in cfg.fallback_on:
        return None
    if RULES[cls] == SPENT and attempt < cfg.retry.max_retries:
        return None
    for j in range(index + 1, len(chain)):
        if cls == "context_too_long":
            have, bigger = chain[index].context_window, chain[j].context_window
            if have is None or bigger is None or bigger <= have:
                continue
        return j, cls
    return None


def link_name(cfg: RunConfig, index: int) -> str:
    return cfg.chain[index].name if index < len(cfg.chain) else str(index)


def move_on(s: RunState, now_ms: int, to: int, reason: str, cmds: list[Command]) -> Decision:
    """The call again, on provider ``to``: announced (``model_fallback``), its attempts counted from
    0, and only if the run's budget affords it at that provider's prices."""
    cfg = s.cfg
    came = s.provider_index
    s = up(s, provider_index=to, attempt=0, failures=s.failures + 1, call=CallPhase.CALLING,
           called_llm_at_ms=now_ms)  # fmt: skip
    cmds = [
        *cmds,
        status_event(
            "model_fallback",
            modelCallIndex=s.model_call_index,
            reason=reason,
            model=cfg.chain[to].model,
            **{"from": link_name(cfg, came), "to": link_name(cfg, to)},
        ),
    ]
    if (late := over_time(s, now_ms)) is not None:
        return finish(s, RunStatus.FAILED, cmds, error=late)
    total = spent_with_children(s)
    spent = total.input_tokens + total.output_tokens
    if (err := unaffordable(cfg, spent, total.cost_usd, build_messages_for_call(s), to)) is not None:
        return finish(s, RunStatus.FAILED, cmds, error=err)
    return s, [*cmds, CallModel(request_of(s))]
