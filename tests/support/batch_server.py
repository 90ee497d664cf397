"""A local server speaking OpenAI's Batch API (and Anthropic's Message Batches, tests/support/
message_batches.py) for tests: ``/v1/files`` (upload a JSONL file with
purpose ``batch``, read it and its content back) and ``/v1/batches`` (create, retrieve, cancel, list);
and ``/v1/chat/completions`` (streamed) by the same backend, the standard lane of the same provider.

Each request line of a batch is answered by ``backend`` (a chat-completions answerer: a request's
body in, a status and a response body out) once the batch has waited ``delay_s``. What happens to
a batch is chosen per batch by ``plans`` (consumed in order of creation, then ``Plan()``): it
completes, fails validation, expires with only its first ``answered`` lines done, or has some lines
answered with an error. Every line received is counted by ``custom_id`` in ``received``, so a test
can show that no request was submitted twice.

The shapes follow OpenAI's documented objects (``Batch``, ``FileObject``, the output and error files'
lines); tests/integration/test_batch_server.py checks them with the official ``openai`` client.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.chat_answers import ChatBackend, chat_completion, tool_rounds_backend
from tests.support.message_batches import MessageBatches
from tests.support.redis_server import free_port

__all__ = ["BatchServer", "ChatBackend", "Plan", "chat_completion", "tool_rounds_backend"]

MAX_LINES = 50_000  # OpenAI's limit of requests per batch
ENDPOINTS = ("/v1/chat/completions",)


@dataclass
class Plan:
    """What happens to one batch. ``outcome``: ``completed``; ``failed`` (validation: no line is
    answered); ``expired`` (only the first ``answered`` lines are answered, the rest get
    ``batch_expired``). ``fail_ids``: custom_ids answered with a 500 error in the error file.
    ``delay_s``: this batch's wait, in place of the server's."""

    outcome: Literal["completed", "failed", "expired"] = "completed"
    answered: int = 0
    fail_ids: frozenset[str] = frozenset()
    delay_s: float | None = None


@dataclass
class _File:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int = field(default_factory=lambda: int(time.time()))

    def object(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


@dataclass
class _Batch:
    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None
    total: int
    status: str = "validating"
    created_at: int = field(default_factory=lambda: int(time.time()))
    times: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: {"completed": 0, "failed": 0})
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[dict[str, Any]] | None = None
    task: asyncio.Task[None] | None = None

    def set(self, status: str) -> None:
        self.status = status
        self.times[f"{status}_at"] = int(time.time())

    def object(self) -> dict[str, Any]:
        stamps = ("in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled")
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": None if self.errors is None else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "expires_at": self.created_at + 86_400,
            **{f"{s}_at": self.times.get(f"{s}_at") for s in stamps},
            "request_counts": {"total": self.total, **self.counts},
            "metadata": self.metadata,
        }


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    return JSONResponse(body, status_code=status)


class BatchServer:
    """``async with BatchServer(backend, delay_s=0.2) as server``; its base URL is ``server.base_url``."""

    def __init__(
        self, backend: ChatBackend, *, delay_s: float = 0.0, plans: list[Plan] | None = None
    ) -> None:
        self.backend = backend
        self.delay_s = delay_s
        self.plans = list(plans or [])
        self.files: dict[str, _File] = {}
        self.batches: dict[str, _Batch] = {}
        self.received: Counter[str] = Counter()  # custom_id -> times it arrived in a created batch
        self.answered: Counter[str] = Counter()  # custom_id -> times the backend answered it
        self.standard: list[dict[str, Any]] = []  # requests made on the standard lane (chat completions)
        self._ids = itertools.count(1)
        self.port = free_port()
        self.messages = MessageBatches(self)  # Anthropic's Message Batches and Messages API
        app = Starlette(
            routes=[
                Route("/v1/files", self.upload, methods=["POST"]),
                Route("/v1/files/{file_id}", self.file, methods=["GET"]),
                Route("/v1/files/{file_id}/content", self.content, methods=["GET"]),
                Route("/v1/batches", self.create, methods=["POST"]),
                Route("/v1/batches", self.list_batches, methods=["GET"]),
                Route("/v1/batches/{batch_id}", self.retrieve, methods=["GET"]),
                Route("/v1/batches/{batch_id}/cancel", self.cancel, methods=["POST"]),
                Route("/v1/chat/completions", self.completions, methods=["POST"]),
                *self.messages.routes(),
            ]
        )
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off")
        )
        self.task: asyncio.Task[None] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> BatchServer:
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for b in self.batches.values():
            if b.task is not None:
                b.task.cancel()
        self.messages.close()
        self.server.should_exit = True
        if self.task:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.task, 5)

    def next_plan(self) -> Plan:
        return self.plans.pop(0) if self.plans else Plan()

    def _id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids):06d}"

    # the standard lane: the same backend, streamed as one chunk

    async def completions(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.standard.append(body)
        status, answer = await self.backend(body)
        if status != 200:
            return JSONResponse(answer, status_code=status)
        choice = answer["choices"][0]
        delta = dict(choice["message"])
        if delta.get("tool_calls"):
            delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(delta["tool_calls"])]
        chunks = [
            {"id": answer["id"], "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]},
            {"id": answer["id"], "object": "chat.completion.chunk",
             "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
            {"id": answer["id"], "object": "chat.completion.chunk", "choices": [], "usage": answer["usage"]},
        ]  # fmt: skip
        sse = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        return Response(sse, media_type="text/event-stream")

    # files

    async def upload(self, request: Request) -> Response:
        async with request.form(max_part_size=200 * 1024 * 1024) as form:
            upload, purpose = form.get("file"), form.get("purpose")
            if not isinstance(upload, UploadFile):
                return _error(400, "a file is required", "file")
            if purpose != "batch":
                return _error(400, f"purpose {purpose!r} is not supported here; use 'batch'", "purpose")
            f = _File(self._id("file"), upload.filename or "upload.jsonl", "batch", await upload.read())
        self.files[f.id] = f
        return JSONResponse(f.object())

    async def file(self, request: Request) -> Response:
        f = self.files.get(request.path_params["file_id"])
        return JSONResponse(f.object()) if f else _error(404, "No such File object")

    async def content(self, request: Request) -> Response:
        f = self.files.get(request.path_params["file_id"])
        if f is None:
            return _error(404, "No such File object")
        return Response(f.content, media_type="application/octet-stream")

    # batches

    async def create(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        f = self.files.get(str(body.get("input_file_id")))
        if f is None:
            return _error(400, "input_file_id does not exist", "input_file_id")
        endpoint = body.get("endpoint")
        if endpoint not in ENDPOINTS:
            return _error(400, f"endpoint {endpoint!r} is not supported", "endpoint")
        if body.get("completion_window") != "24h":
            return _error(400, "completion_window must be 24h", "completion_window")
        lines = [orjson.loads(x) for x in f.content.splitlines() if x.strip()]
        b = _Batch(self._id("batch"), f.id, endpoint, "24h", body.get("metadata"), len(lines))
        self.batches[b.id] = b
        for line in lines:
            self.received[str(line.get("custom_id"))] += 1
        plan = self.next_plan()
        b.task = asyncio.create_task(self._work(b, lines, plan))
        return JSONResponse(b.object())

    async def retrieve(self, request: Request) -> Response:
        b = self.batches.get(request.path_params["batch_id"])
        return JSONResponse(b.object()) if b else _error(404, "No such Batch object")

    async def list_batches(self, request: Request) -> Response:
        after = request.query_params.get("after")
        limit = max(1, min(100, int(request.query_params.get("limit", "20"))))
        ordered = sorted(self.batches.values(), key=lambda b: b.id, reverse=True)  # newest first
        if after:
            ordered = [b for b in ordered if b.id < after]
        page = ordered[:limit]
        return JSONResponse(
            {
                "object": "list",
                "data": [b.object() for b in page],
                "first_id": page[0].id if page else None,
                "last_id": page[-1].id if page else None,
                "has_more": len(ordered) > limit,
            }
        )

    async def cancel(self, request: Request) -> Response:
        b = self.batches.get(request.path_params["batch_id"])
        if b is None:
            return _error(404, "No such Batch object")
        if b.status not in ("validating", "in_progress", "finalizing"):
            return _error(409, f"Cannot cancel a batch with status '{b.status}'.")
        b.set("cancelling")
        if b.task is not None:
            b.task.cancel()
        return JSONResponse(b.object())

    async def _work(self, b: _Batch, lines: list[dict[str, Any]], plan: Plan) -> None:
        outputs: list[bytes] = []
        errors: list[bytes] = []
        try:
            invalid = self._validate(lines)
            if plan.outcome == "failed" or invalid:
                b.errors = invalid or [
                    {"code": "invalid_request", "message": "The batch was refused.", "line": None}
                ]
                b.set("failed")
                return
            b.set("in_progress")
            await asyncio.sleep(self.delay_s if plan.delay_s is None else plan.delay_s)
            answerable = plan.answered if plan.outcome == "expired" else len(lines)
            for n, line in enumerate(lines):
                cid = str(line["custom_id"])
                if n >= answerable:
                    errors.append(self._line(cid, None, {"code": "batch_expired", "message": "expired"}))
                    b.counts["failed"] += 1
                    continue
                if cid in plan.fail_ids:
                    err = {"error": {"message": "upstream failed", "type": "server_error", "code": None}}
                    errors.append(self._line(cid, (500, err), None))
                    b.counts["failed"] += 1
                    continue
                status, body = await self.backend(line["body"])
                self.answered[cid] += 1
                (outputs if status == 200 else errors).append(self._line(cid, (status, body), None))
                b.counts["completed" if status == 200 else "failed"] += 1
            b.set("finalizing")
        except asyncio.CancelledError:
            for line in lines[len(outputs) + len(errors) :]:
                errors.append(
                    self._line(
                        str(line["custom_id"]), None, {"code": "batch_cancelled", "message": "cancelled"}
                    )
                )
            self._files(b, outputs, errors)
            b.set("cancelled")
            return
        self._files(b, outputs, errors)
        b.set("expired" if plan.outcome == "expired" else "completed")

    def _validate(self, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        problems: list[dict[str, Any]] = []
        if len(lines) > MAX_LINES:
            problems.append(
                {"code": "too_many_requests", "message": f"over {MAX_LINES} requests", "line": None}
            )
        seen: set[str] = set()
        for n, line in enumerate(lines, 1):
            cid = line.get("custom_id")
            if not isinstance(cid, str) or not cid:
                problems.append({"code": "missing_custom_id", "message": "custom_id is required", "line": n})
            elif cid in seen:
                problems.append(
                    {"code": "duplicate_custom_id", "message": f"duplicate custom_id {cid}", "line": n}
                )
            else:
                seen.add(cid)
            if (
                line.get("method") != "POST"
                or line.get("url") not in ENDPOINTS
                or not isinstance(line.get("body"), dict)
            ):
                problems.append(
                    {"code": "invalid_request", "message": "method, url or body invalid", "line": n}
                )
        return problems

    def _line(
        self, cid: str, response: tuple[int, dict[str, Any]] | None, error: dict[str, str] | None
    ) -> bytes:
        resp = None
        if response is not None:
            resp = {"status_code": response[0], "request_id": self._id("req"), "body": response[1]}
        return orjson.dumps({"id": self._id("batch_req"), "custom_id": cid, "response": resp, "error": error})

    def _files(self, b: _Batch, outputs: list[bytes], errors: list[bytes]) -> None:
        if outputs:
            f = _File(self._id("file"), f"{b.id}_output.jsonl", "batch_output", b"\n".join(outputs) + b"\n")
            self.files[f.id] = f
            b.output_file_id = f.id
        if errors:
            f = _File(self._id("file"), f"{b.id}_error.jsonl", "batch_output", b"\n".join(errors) + b"\n")
            self.files[f.id] = f
            b.error_file_id = f.id
