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
from shared import endpoint_keys, payload_crypto
from shared.profiles import AgentProfile, ProviderConfig
from worker.core import policy
from worker.core.policy import ModelFailure
from worker.economy.run_side import custom_id
from worker.machine import (
    BudgetRefused,
    ModelDeferred,
    ModelFailed,
    ModelReplied,
    ModelRequest,
    RunState,
    notices,
)
from worker.models.base import TextDelta, ToolCallDelta
from worker.models.openai import ChunkReader, request_body
from worker.runner.effect import EffectContext
from worker.runner.reply import assemble

__all__ = ["economy_call", "reply_of"]


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
    if got.standard:
        return await _standard(cx, req, "deadline")
    cid = custom_id(cx.run_id, req.model_call_index)
    if cx.ports.budgets.limited(cx.tenant):  # held at the batch price (RunConfig.link_pricing)
        hold_id = f"{cid}.{req.attempt}.economy"
        got_hold = await cx.ports.budgets.reserve(
            cx.tenant, hold_id, req.reserve_tokens, req.reserve_cost_usd
        )
        if isinstance(got_hold, str):  # the tenant's day cannot afford it: nothing is written
            cx.post(BudgetRefused(cx.now_ms(), got_hold))
            return True
    payload = {k: v for k, v in request_body(pcfg, req).items() if k not in ("stream", "stream_options")}
    line = orjson.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": payload})
    line = payload_crypto.active().seal_json(line)  # the run's content, sealed at rest as a transcript is
    endpoint = endpoint_keys.endpoint_hash(pcfg.base_url)
    if await port.enqueue(endpoint, pcfg.model, cid, line) < 0:
        return await _standard(cx, req, "economy_full")
    cx.host.failpoints.hit("after_economy_enqueue")
    cx.post(ModelDeferred(cx.now_ms(), cid, state.cfg.switch_at_ms(state.started_at_ms), endpoint))
    return True


async def _standard(cx: EffectContext, req: ModelRequest, reason: str) -> bool:
    cx.out.emit(notices.lane_changed(req, reason))
    cx.host.observer.lane_changed(reason)
    return False


def reply_of(body: dict[str, Any], req: ModelRequest) -> tuple[list[str], dict[int, dict[str, str]], Any]:
    """A chat completion read as the stream of it would be: (text, tool calls, StreamEnd)."""
    reader = ChunkReader()
    choice = (body.get("choices") or [{}])[0]
    message = dict(choice.get("message") or {})
    delta: dict[str, Any] = {"content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(message["tool_calls"])]
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    chunk = {
        "choices": [{"index": 0, "delta": delta, "finish_reason": choice.get("finish_reason")}],
        "usage": body.get("usage"),
    }
    for c in reader.consume(chunk):
        if isinstance(c, TextDelta):
            text.append(c.text)
        elif isinstance(c, ToolCallDelta):
            slot = calls.setdefault(c.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = slot["id"] or (c.id or "")
            slot["name"] = slot["name"] or (c.name or "")
            slot["arguments"] += c.arguments
    return text, calls, reader.end(done=True)


async def _replied(
    cx: EffectContext, req: ModelRequest, agent: str, pcfg: ProviderConfig, body: dict[str, Any]
) -> bool:
    text, calls, end = reply_of(body, req)
    try:
        msg = assemble(req, text, calls)
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
