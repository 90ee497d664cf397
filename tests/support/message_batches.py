"""The Anthropic side of the local batch server (tests/support/batch_server.py): Message Batches at
``/v1/messages/batches`` (create with ``requests: [{custom_id, params}]``, retrieve, list, cancel,
results as JSONL at the batch's ``results_url``) and ``/v1/messages`` (streamed), the standard lane.

Each request's ``params`` (a Messages API request) is answered by the server's chat-completions
``backend``, translated both ways: the system, text, ``tool_use`` and ``tool_result`` blocks become
chat messages, the completion becomes a ``message`` (``tool_use`` blocks, ``stop_reason``,
``usage``; ``cache_read_tokens`` of the prompt are reported as cache reads when the request marks
a ``cache_control`` breakpoint). The server's ``delay_s`` and ``plans`` apply as on the OpenAI
side: ``failed`` answers every request ``errored``, ``expired`` answers the first ``answered`` and
expires the rest, ``fail_ids`` (wire custom_ids) are ``errored``. Every request of a created batch
is counted by its custom_id in the server's ``received``.

Shapes follow Anthropic's documented objects (``MessageBatch``, the results' lines);
tests/integration/test_batch_server.py checks them with the official ``anthropic`` client.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from tests.support.batch_server import BatchServer, Plan

__all__ = ["MessageBatches", "chat_of", "message_of"]

CUSTOM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_REQUESTS = 100_000
STOPS = {"tool_calls": "tool_use", "stop": "end_turn", "length": "max_tokens"}


def _stamp(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"
    )


def chat_of(params: dict[str, Any]) -> dict[str, Any]:
    """A Messages request as the chat-completions body the backend answers."""
    messages: list[dict[str, Any]] = []
    if params.get("system"):
        messages.append({"role": "system", "content": _text(params["system"])})
    for m in params.get("messages") or []:
        blocks = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        if m["role"] == "assistant":
            calls = [
                {"id": b["id"], "type": "function",
                 "function": {"name": b["name"], "arguments": orjson.dumps(b.get("input") or {}).decode()}}
                for b in blocks if b.get("type") == "tool_use"
            ]  # fmt: skip
            messages.append(
                {
                    "role": "assistant",
                    "content": _text(blocks) or None,
                    **({"tool_calls": calls} if calls else {}),
                }
            )
            continue
        for b in blocks:
            if b.get("type") == "tool_result":
                messages.append(
                    {"role": "tool", "tool_call_id": b["tool_use_id"], "content": _text(b.get("content", ""))}
                )
        if text := _text(blocks):
            messages.append({"role": "user", "content": text})
    return {"model": params.get("model"), "messages": messages}


def message_of(answer: dict[str, Any], cache_read: int = 0) -> dict[str, Any]:
    """A chat completion as a Messages API ``message``."""
    choice = answer["choices"][0]
    msg = choice["message"]
    content: list[dict[str, Any]] = [{"type": "text", "text": msg["content"]}] if msg.get("content") else []
    for c in msg.get("tool_calls") or []:
        fn = c["function"]
        content.append(
            {
                "type": "tool_use",
                "id": "toolu_" + c["id"],
                "name": fn["name"],
                "input": orjson.loads(fn["arguments"] or "{}"),
            }
        )
    u = answer.get("usage") or {}
    prompt = int(u.get("prompt_tokens", 0))
    read = min(cache_read, prompt)
    return {
        "id": "msg_" + str(answer.get("id", "")).rpartition("-")[2],
        "type": "message",
        "role": "assistant",
        "model": answer.get("model"),
        "content": content,
        "stop_reason": STOPS.get(choice.get("finish_reason") or "stop", "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": prompt - read, "output_tokens": int(u.get("completion_tokens", 0)),
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": read},
    }  # fmt: skip


def _sse(message: dict[str, Any]) -> bytes:
    """A message as the events of its stream."""
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 0}}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for i, b in enumerate(message["content"]):
        first: dict[str, Any]
        delta: dict[str, Any]
        if b["type"] == "text":
            first, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": b["text"]}
        else:
            first = {**b, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": orjson.dumps(b["input"]).decode()}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": i, "content_block": first}),
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": i}),
        ]
    events += [
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"]},
                           "usage": message["usage"]}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return b"".join(f"event: {e}\ndata: ".encode() + orjson.dumps(d) + b"\n\n" for e, d in events)


@dataclass
class _Batch:
    id: str
    requests: list[dict[str, Any]]
    results_url: str
    status: str = "in_progress"
    created_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    cancel_initiated_at: float | None = None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # custom_id -> result
    task: asyncio.Task[None] | None = None

    def object(self) -> dict[str, Any]:
        counts = {k: 0 for k in ("processing", "succeeded", "errored", "canceled", "expired")}
        if self.status == "ended":
            for r in self.results.values():
                counts[r["type"]] += 1
        else:
            counts["processing"] = len(self.requests)
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": self.status,
            "request_counts": counts,
            "created_at": _stamp(self.created_at),
            "expires_at": _stamp(self.created_at + 86_400),
            "ended_at": _stamp(self.ended_at),
            "cancel_initiated_at": _stamp(self.cancel_initiated_at),
            "archived_at": None,
            "results_url": self.results_url if self.status == "ended" else None,
        }


class MessageBatches:
    def __init__(self, server: BatchServer, cache_read_tokens: int = 0) -> None:
        self.server = server
        self.cache_read_tokens = cache_read_tokens
        self.batches: dict[str, _Batch] = {}
        self.standard: list[dict[str, Any]] = []  # /v1/messages requests (the standard lane)
        self._ids = itertools.count(1)

    def routes(self) -> list[Route]:
        return [
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/messages/batches", self.create, methods=["POST"]),
            Route("/v1/messages/batches", self.list_batches, methods=["GET"]),
            Route("/v1/messages/batches/{batch_id}", self.retrieve, methods=["GET"]),
            Route("/v1/messages/batches/{batch_id}/cancel", self.cancel, methods=["POST"]),
            Route("/v1/messages/batches/{batch_id}/results", self.results, methods=["GET"]),
        ]

    def close(self) -> None:
        for b in self.batches.values():
            if b.task is not None:
                b.task.cancel()

    async def _answer(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, answer = await self.server.backend(chat_of(params))
        if status != 200:
            return status, {"type": "error", "error": {"type": "api_error", "message": str(answer)[:200]}}
        cached = self.cache_read_tokens if b"cache_control" in orjson.dumps(params) else 0
        return 200, message_of(answer, cached)

    async def messages(self, request: Request) -> Response:
        params = orjson.loads(await request.body())
        self.standard.append(params)
        status, body = await self._answer(params)
        if status != 200:
            return JSONResponse(body, status_code=status)
        if not params.get("stream"):
            return JSONResponse(body)
        return Response(_sse(body), media_type="text/event-stream")

    async def create(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests or len(requests) > MAX_REQUESTS:
            return _error(400, f"requests: between 1 and {MAX_REQUESTS} requests are required")
        seen: set[str] = set()
        for n, r in enumerate(requests):
            cid, params = r.get("custom_id"), r.get("params")
            if not isinstance(cid, str) or not CUSTOM_ID.fullmatch(cid):
                return _error(400, f"requests.{n}.custom_id: must match ^[a-zA-Z0-9_-]{{1,64}}$")
            if cid in seen:
                return _error(400, f"requests.{n}.custom_id: duplicate custom_id {cid}")
            seen.add(cid)
            if not isinstance(params, dict) or not all(
                k in params for k in ("model", "max_tokens", "messages")
            ):
                return _error(400, f"requests.{n}.params: model, max_tokens and messages are required")
        bid = f"msgbatch_{next(self._ids):06d}"
        b = _Batch(bid, requests, f"{self.server.base_url}/messages/batches/{bid}/results")
        self.batches[bid] = b
        for r in requests:
            self.server.received[r["custom_id"]] += 1
        plan = self.server.next_plan()
        b.task = asyncio.create_task(self._work(b, plan))
        return JSONResponse(b.object())

    async def retrieve(self, request: Request) -> Response:
        b = self.batches.get(request.path_params["batch_id"])
        return JSONResponse(b.object()) if b else _error(404, "batch not found", "not_found_error")

    async def list_batches(self, request: Request) -> Response:
        q = request.query_params
        limit = max(1, min(1000, int(q.get("limit", "20"))))
        ordered = sorted(self.batches.values(), key=lambda b: b.id, reverse=True)  # newest first
        if q.get("after_id"):
            ordered = [b for b in ordered if b.id < q["after_id"]]
        if q.get("before_id"):
            ordered = [b for b in ordered if b.id > q["before_id"]]
        page = ordered[:limit]
        return JSONResponse({
            "data": [b.object() for b in page],
            "has_more": len(ordered) > limit,
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
        })  # fmt: skip

    async def cancel(self, request: Request) -> Response:
        b = self.batches.get(request.path_params["batch_id"])
        if b is None:
            return _error(404, "batch not found", "not_found_error")
        if b.status == "ended":
            return _error(409, "the batch has ended and cannot be canceled")
        if b.status == "in_progress":
            b.status, b.cancel_initiated_at = "canceling", time.time()
            if b.task is not None:
                b.task.cancel()
        return JSONResponse(b.object())

    async def results(self, request: Request) -> Response:
        b = self.batches.get(request.path_params["batch_id"])
        if b is None:
            return _error(404, "batch not found", "not_found_error")
        if b.status != "ended":
            return _error(400, "the batch's results are not available until it has ended")
        lines = [orjson.dumps({"custom_id": cid, "result": r}) for cid, r in b.results.items()]
        return Response(b"\n".join(lines) + b"\n", media_type="application/binary")

    async def _work(self, b: _Batch, plan: Plan) -> None:
        try:
            await asyncio.sleep(self.server.delay_s if plan.delay_s is None else plan.delay_s)
            for n, r in enumerate(b.requests):
                cid = r["custom_id"]
                if plan.outcome == "expired" and n >= plan.answered:
                    b.results[cid] = {"type": "expired"}
                elif plan.outcome == "failed" or cid in plan.fail_ids:
                    err = {"type": "api_error", "message": "upstream failed"}
                    b.results[cid] = {"type": "errored", "error": {"type": "error", "error": err}}
                else:
                    status, body = await self._answer(r["params"])
                    self.server.answered[cid] += 1
                    b.results[cid] = (
                        {"type": "succeeded", "message": body}
                        if status == 200
                        else {"type": "errored", "error": body}
                    )
        except asyncio.CancelledError:
            for r in b.requests:
                b.results.setdefault(r["custom_id"], {"type": "canceled"})
        b.status, b.ended_at = "ended", time.time()
