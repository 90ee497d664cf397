"""A model call of an economy run (``RunConfig.lane``): not streamed but written as one request of
its provider endpoint's open batch, the run then parking (``ModelDeferred``); when the run is back,
the batch's answer is with it and becomes the reply (``ModelReplied``), usage at the batch price.
A call the economy lane cannot take (the open batch full, the batch failed or expired for it, the
run's economy deadline come) goes to the standard lane: a ``lane_changed`` event says why and the
caller streams it as usual.

Failpoint ``after_economy_enqueue``: the worker dies once the request is written and before the run
parks (its successor finds the request written and parks the run without writing it again)."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from agentmill_client.models import Usage
from shared import payload_crypto
from shared.profiles import AgentProfile
from shared.provider_config import ProviderConfig
from worker.core import policy
from worker.core.policy import ModelFailure
from worker.economy.run_side import custom_id
from worker.economy.wire import batch_endpoint, reply_of, request_line
from worker.machine import (
    BudgetRefused,
    ModelDeferred,
    ModelFailed,
    ModelReplied,
    ModelRequest,
    RunState,
    notices,
)
from worker.runner.effect import EffectContext
from worker.runner.reply import assemble

__all__ = ["economy_call"]


async def economy_call(
    cx: EffectContext, state: RunState, req: ModelRequest, profile: AgentProfile, at: int
) -> bool:
    """True: the call was answered from its batch or deferred to one; False: make it on the
    standard lane (a ``lane_changed`` event was emitted when it had been an economy call)."""
    port = cx.ports.economy
    pcfg = profile.chain[at]
    if port is None or state.cfg.lane != "economy" or req.purpose == "summary":
        return False
    if (
        not profile.economy.allows(profile.provider_names()[at], pcfg.kind)
        or not pcfg.base_url
        or not pcfg.model
    ):
        return False
    got = await port.answer(req.model_call_index)
    if got.reply is not None:
        answer = orjson.loads(got.reply)
        body = answer.get("body")
        if isinstance(body, dict):
            return await _replied(cx, req, profile.name, pcfg, body)
        return await _standard(cx, req, str(answer.get("error") or "failed"))
    cid = custom_id(cx.run_id, req.model_call_index)
    if got.standard:  # its deadline came first: the request, if still waiting, is withdrawn
        await port.withdraw(batch_endpoint(pcfg), pcfg.model, cid)
        return await _standard(cx, req, "deadline")
    if cx.ports.budgets.limited(cx.tenant):  # held at the batch price (RunConfig.link_pricing)
        hold_id = f"{cid}.{req.attempt}.economy"
        got_hold = await cx.ports.budgets.reserve(
            cx.tenant, hold_id, req.reserve_tokens, req.reserve_cost_usd
        )
        if isinstance(got_hold, str):  # the tenant's day cannot afford it: nothing is written
            cx.post(BudgetRefused(cx.now_ms(), got_hold))
            return True
    line = payload_crypto.active().seal_json(
        request_line(pcfg, req, cid)
    )  # sealed at rest as a transcript is
    endpoint = batch_endpoint(pcfg)
    if await port.enqueue(endpoint, pcfg.model, cid, line) < 0:
        return await _standard(cx, req, "economy_full")
    cx.host.failpoints.hit("after_economy_enqueue")
    cx.post(ModelDeferred(cx.now_ms(), cid, state.cfg.switch_at_ms(state.started_at_ms), endpoint))
    return True


async def _standard(cx: EffectContext, req: ModelRequest, reason: str) -> bool:
    cx.out.emit(notices.lane_changed(req, reason))
    cx.host.observer.lane_changed(reason)
    return False


async def _replied(
    cx: EffectContext, req: ModelRequest, agent: str, pcfg: ProviderConfig, body: dict[str, Any]
) -> bool:
    text, calls, thinking, end = reply_of(pcfg.kind, body)
    try:
        msg = assemble(req, text, calls, thinking)
    except ValidationError as exc:
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
        failure = ModelFailure(kind="invalid", message=f"the model's reply is not a valid message: {detail}")
        cx.post(ModelFailed(cx.now_ms(), failure, cx.ports.rng.random(), partial=False))
        return True
    prices = pcfg.prices()
    usage: Usage = policy.call_usage(end.usage, req.messages, msg, prices.at_batch() if prices else None)
    usage = usage.model_copy(update={"lane": "economy"})
    cx.host.observer.tokens_used(usage, agent=agent, model=pcfg.model_name)
    port = cx.ports.economy
    if port is not None:
        await port.spent(
            cx.tenant,
            custom_id(cx.run_id, req.model_call_index),
            usage.input_tokens + usage.output_tokens,
            usage.cost_usd,
        )
    cx.post(ModelReplied(cx.now_ms(), msg, usage, end.finish_reason, cx.ports.rng.random(), False))
    return True
