"""The HTTP API (FastAPI on uvicorn): submit, follow, control runs. Every route is in the OpenAPI doc.

FastAPI because it is the ecosystem's default ASGI framework: pydantic bodies (our contracts are
pydantic already), an OpenAPI document for free, and Starlette's streaming responses for SSE.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

import orjson
from fastapi import Depends, FastAPI, Header, Query, Request, Response
from pydantic import BaseModel, Field
from redis.asyncio import Redis
from starlette.exceptions import HTTPException as StarletteHTTPException

from producer.api import errors
from producer.api.auth import Authenticator
from producer.api.errors import COMMON_ERRORS, ErrorResponse, OrjsonResponse
from producer.api.metrics import ApiMetrics
from producer.api.streams import SlotStreamingResponse, StreamLimiter
from producer.enqueue import Producer, RunRecord, SubmissionError, Submitted
from shared import limits
from shared.api import (
    AbortAnswer,
    Accepted,
    ApprovalsAnswer,
    ApprovalVerdict,
    BatchAnswer,
    EventsPage,
    RunView,
    SessionView,
    ToolResultsAnswer,
    ToolResultsBody,
    ToolResultVerdict,
)
from shared.codec import to_jsonable
from shared.errors import ApiError
from shared.ids import ID_PATTERN, new_batch_id
from shared.models import ApprovalDecision, RunInput
from shared.profiles import profiles_from
from shared.quotas import Quotas
from shared.redis_conn import connect
from shared.settings import Settings, get_settings

__all__ = [
    "MAX_BLOCK_S",
    "QUOTA_CODES",
    "Api",
    "ApiDep",
    "ApprovalsBody",
    "BatchBody",
    "BodyLimit",
    "Tenant",
    "create_app",
    "get_api",
    "run_links",
    "tenant_of",
]

log = logging.getLogger("agentmill.api")
QUOTA_CODES = ("quota_exceeded", "rate_limited")
MAX_BLOCK_S = 5.0  # longest blocking stream read (XREAD BLOCK) of an SSE stream or long-poll


# ---- bodies and answers (documented in OpenAPI) ----


class BatchBody(BaseModel):
    runs: list[dict[str, Any]] = Field(
        description="RunInput objects; each is validated on its own; at most AGENTMILL_MAX_BATCH of them"
    )
    webhook: str | None = Field(
        default=None, description="applies to items without their own webhook", pattern=r"^https?://"
    )
    batchId: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="names the batch (generated when absent); items without a runId get one derived from "
        "(batchId, offset + index), so sending the same batch again creates nothing new",
    )
    offset: int = Field(default=0, ge=0, description="index of the first item, for a batch sent in parts")
    batchWebhook: str | None = Field(
        default=None,
        max_length=2048,
        pattern=r"^https?://",
        description="POSTed the batch's counters once all its runs ended",
    )


class ApprovalsBody(BaseModel):
    decisions: list[ApprovalDecision] = Field(min_length=1, max_length=256)


# ---- the app ----


class BodyLimit:
    """413 for bodies over the limit, by Content-Length or by counting a streamed body; 408 for a
    body that has not fully arrived ``timeout_s`` after the request started."""

    def __init__(self, app: Any, max_bytes: int, timeout_s: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]], send: Any
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._reject(send, 413, "too_large", f"request body over {self.max_bytes} bytes")
            return
        seen = 0
        deadline = time.monotonic() + self.timeout_s
        complete = False

        async def counted() -> dict[str, Any]:
            nonlocal seen, complete
            if complete:  # after the body: waiting for a disconnect (SSE) has no deadline
                return await receive()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    msg = await receive()
            except TimeoutError:
                raise _SlowBody(self.timeout_s) from None
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                complete = not msg.get("more_body", False)
                if seen > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
            return msg

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._reject(send, 413, "too_large", f"request body over {self.max_bytes} bytes")
        except _SlowBody:
            await self._reject(
                send, 408, "request_timeout", f"the request body did not arrive within {self.timeout_s:g} s"
            )

    async def _reject(self, send: Any, status: int, code: str, message: str) -> None:
        body = orjson.dumps({"error": {"code": code, "message": message}})
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(StarletteHTTPException):
    """Raised while the body streams in (no Content-Length). An HTTPException, so FastAPI's body
    parsing lets it through as a 413 instead of turning it into a 400 "error parsing the body"."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body over {max_bytes} bytes")


class _SlowBody(StarletteHTTPException):
    def __init__(self, timeout_s: float) -> None:
        super().__init__(408, f"the request body did not arrive within {timeout_s:g} s")


class Api:
    """Shared state of one API process."""

    def __init__(self, settings: Settings, redis: Redis, stream_redis: Redis | None = None) -> None:
        self.settings = settings
        self.redis = redis
        self.producer = Producer(
            redis, settings=settings, profiles=profiles_from(settings.profiles), stream_redis=stream_redis
        )
        self.streams = StreamLimiter(settings.max_streams_per_tenant, settings.max_streams)
        self.quotas = Quotas(settings)
        self.auth = Authenticator(settings)
        self.metrics = ApiMetrics()
        self._depth = (0.0, 0)
        self.sse_heartbeat_s = float(os.environ.get("AGENTMILL_SSE_HEARTBEAT_S", "10"))

    async def queue_depth(self) -> int:
        at, depth = self._depth
        if time.monotonic() - at > 0.5:
            depth = await self.producer.queue_depth()
            self._depth = (time.monotonic(), depth)
        return depth

    async def admit(self, n: int = 1) -> None:
        """Backpressure: refuse new work while the queue is deeper than configured."""
        if await self.queue_depth() + n > self.settings.max_queue_depth:
            raise ApiError(
                429,
                "queue_full",
                f"the queue holds more than {self.settings.max_queue_depth} runs; retry later",
                headers={"Retry-After": "5"},
            )


def _link(path: str, method: str, **parameters: str) -> dict[str, Any]:
    """An OpenAPI link to another operation (clients and the stateful fuzzer follow them)."""
    return {"operationRef": "#/paths/" + path.replace("/", "~1") + "/" + method, "parameters": parameters}


def run_links(run_id: str) -> dict[str, Any]:
    """Links from an answer naming a run to what can be done with that run."""
    return {
        "GetRun": _link("/v1/runs/{run_id}", "get", run_id=run_id),
        "WaitRun": _link("/v1/runs/{run_id}/wait", "get", run_id=run_id),
        "RunEvents": _link("/v1/runs/{run_id}/events", "get", run_id=run_id),
        "AbortRun": _link("/v1/runs/{run_id}/abort", "post", run_id=run_id),
        "DecideApprovals": _link("/v1/runs/{run_id}/approvals", "post", run_id=run_id),
    }


def get_api(request: Request) -> Api:
    api: Api = request.app.state.api
    return api


async def tenant_of(request: Request, authorization: Annotated[str | None, Header()] = None) -> str:
    tenant = get_api(request).auth.tenant(authorization)
    if tenant is None:
        raise ApiError(
            401, "unauthorized", "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
        )
    return tenant


ApiDep = Annotated[Api, Depends(get_api)]
Tenant = Annotated[str, Depends(tenant_of)]


def create_app(
    settings: Settings | None = None, *, redis: Redis | None = None, background: bool = True
) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Two pools: short calls on one, blocking stream reads (SSE, long-polls) on their own, so
        # streams can never take the connections /readyz, submissions and reads need.
        client = redis or connect(
            settings, retries=2, max_connections=256, socket_timeout=settings.redis_timeout_s
        )
        blocking = redis or connect(
            settings, retries=2, max_connections=settings.max_streams + 8,
            socket_timeout=settings.redis_timeout_s + MAX_BLOCK_S,
        )  # fmt: skip
        api = Api(settings, client, blocking)
        app.state.api = api
        tasks: list[asyncio.Task[None]] = []
        stop = asyncio.Event()
        if background and os.environ.get("AGENTMILL_WEBHOOKS", "true").lower() not in ("0", "false", "no"):
            from producer.webhooks import deliver_forever

            tasks.append(asyncio.create_task(deliver_forever(client, settings, stop)))
        try:
            yield
        finally:
            stop.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if redis is None:
                await client.aclose()
                await blocking.aclose()

    app = FastAPI(
        title="agentmill",
        version="0.1.0",
        description="Submit LLM agent runs, follow their events, control them.",
        lifespan=lifespan,
        default_response_class=OrjsonResponse,
    )
    for exc_type, handler in errors.HANDLERS:
        app.add_exception_handler(exc_type, handler)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s)

    @app.middleware("http")
    async def observe(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        t0 = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        request.app.state.api.metrics.request(
            request.method, path, response.status_code, time.perf_counter() - t0
        )
        return response

    async def record_or_404(api: Api, run_id: str, tenant: str) -> RunRecord:
        rec = await api.producer.get(run_id, tenant=tenant)
        if rec is None:
            raise ApiError(404, "unknown_run", f"no run {run_id}")
        return rec

    def view(rec: RunRecord) -> dict[str, Any]:
        return rec.view()

    @app.post(
        "/v1/runs",
        status_code=202,
        response_model=Accepted,
        responses={
            **COMMON_ERRORS,
            202: {"links": run_links("$response.body#/runId")},
            200: {
                "model": Accepted,
                "description": "the same run was submitted before",
                "links": run_links("$response.body#/runId"),
            },
            404: {"model": ErrorResponse},
            409: {"model": ErrorResponse},
            413: {"model": ErrorResponse},
            429: {"model": ErrorResponse},
        },
        summary="Submit one run",
    )
    async def submit(
        body: RunInput,
        api: ApiDep,
        tenant: Tenant,
        response: Response,
        idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
    ) -> Accepted:
        await api.admit()
        try:
            sub = await api.producer.submit(
                body, tenant=tenant, idempotency_key=idempotency_key, quota=api.quotas.of(tenant)
            )
        except SubmissionError:
            api.metrics.submitted(False)
            raise
        api.metrics.submitted(True)
        if not sub.created:
            response.status_code = 200
        return Accepted(runId=sub.run_id, status=sub.status, eventsUrl=f"/v1/runs/{sub.run_id}/events")

    @app.post(
        "/v1/runs/batch",
        response_model=BatchAnswer,
        response_model_exclude_none=True,  # an item is {runId, status} or {error: {code, message[, field]}}
        responses={
            **COMMON_ERRORS,
            200: {"links": run_links("$response.body#/results/0/runId")},
            413: {"model": ErrorResponse},
            429: {"model": ErrorResponse},
        },
        summary="Submit many runs",
    )
    async def submit_batch(body: BatchBody, api: ApiDep, tenant: Tenant) -> Response:
        api.producer.check_batch_size(len(body.runs))
        await api.admit(len(body.runs))
        items: list[Any] = []
        for raw in body.runs:
            if body.webhook and isinstance(raw, dict) and not raw.get("webhook"):
                raw = {**raw, "webhook": body.webhook}
            items.append(raw)
        batch_id = body.batchId or new_batch_id()
        results = await api.producer.submit_many(
            items, tenant=tenant, batch_id=batch_id, offset=body.offset, batch_webhook=body.batchWebhook,
            quota=api.quotas.of(tenant),
        )  # fmt: skip
        if not any(isinstance(r, Submitted) for r in results):  # refused whole by a quota: say so
            refused = next(
                (r for r in results if isinstance(r, SubmissionError) and r.code in QUOTA_CODES), None
            )
            if refused is not None:
                raise ApiError(429, refused.code, refused.message.partition(": ")[2],
                               headers={"Retry-After": str(refused.retry_after_s or 1)})  # fmt: skip
        out: list[dict[str, Any]] = []
        for r in (
            results
        ):  # BatchItem's shape, built directly: validating 1,000 answers costs more than enqueueing them
            out.append(
                {"runId": r.run_id, "status": r.status}
                if isinstance(r, Submitted)
                else {"error": r.as_dict()}
            )
        accepted = sum(1 for r in results if isinstance(r, Submitted))
        api.metrics.submitted(True, accepted)
        api.metrics.submitted(False, len(results) - accepted)
        return OrjsonResponse({"results": out, "batchId": batch_id})

    @app.get(
        "/v1/runs/{run_id}",
        response_model=RunView,
        responses={
            **COMMON_ERRORS,
            200: {
                "links": {
                    "GetSession": _link(
                        "/v1/sessions/{session_id}", "get", session_id="$response.body#/sessionId"
                    )
                }
            },
            404: {"model": ErrorResponse},
        },
        summary="A run's status and result",
    )
    async def get_run(run_id: str, api: ApiDep, tenant: Tenant) -> dict[str, Any]:
        return view(await record_or_404(api, run_id, tenant))

    @app.get(
        "/v1/runs/{run_id}/wait",
        response_model=RunView,
        responses={**COMMON_ERRORS, 404: {"model": ErrorResponse}},
        summary="Long-poll until the run ends",
    )
    async def wait_run(
        run_id: str,
        api: ApiDep,
        tenant: Tenant,
        timeout_s: Annotated[float, Query(alias="timeout", ge=0, le=60)] = 30.0,
    ) -> dict[str, Any]:
        await record_or_404(api, run_id, tenant)
        with api.streams.acquire(tenant):
            rec = await api.producer.wait(run_id, timeout_s=timeout_s, tenant=tenant)
        if rec is None:
            raise ApiError(404, "unknown_run", f"no run {run_id}")
        return view(rec.as_seen_by(run_id))

    @app.get(
        "/v1/runs/{run_id}/events",
        responses={
            **COMMON_ERRORS,
            404: {"model": ErrorResponse},
            200: {
                "description": "text/event-stream (id: seq, event: kind, data: RunEvent JSON), or with format=json an EventsPage",
                "model": EventsPage,  # registers the schema; FastAPI puts it under application/json
                "content": {"text/event-stream": {}},
            },
        },
        summary="A run's events: Server-Sent Events, resumable; or a JSON page",
    )
    async def events(
        run_id: str,
        request: Request,
        api: ApiDep,
        tenant: Tenant,
        after: Annotated[int | None, Query(ge=0, le=limits.MAX_SEQ)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        format: Annotated[str, Query(pattern="^(sse|json)$")] = "sse",
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> Response:
        key = (await record_or_404(api, run_id, tenant)).key
        start = after if after is not None else _seq(last_event_id)
        if format == "json":
            page = await api.producer.read_events(key, after=start, limit=limit, label=run_id)
            return OrjsonResponse(
                {"events": [to_jsonable(e) for e in page], "next": page[-1].seq if page else start}
            )
        slot = api.streams.acquire(tenant)
        return SlotStreamingResponse(
            _sse(api, request, key, start, label=run_id),
            slot,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.post(
        "/v1/runs/{run_id}/abort",
        response_model=AbortAnswer,
        responses={**COMMON_ERRORS, 404: {"model": ErrorResponse}},
        summary="Abort a run",
    )
    async def abort(run_id: str, api: ApiDep, tenant: Tenant) -> AbortAnswer:
        verdict = await api.producer.abort(await api.producer.resolve(run_id, tenant), tenant=tenant)
        if verdict == "unknown":
            raise ApiError(404, "unknown_run", f"no run {run_id}")
        return AbortAnswer(runId=run_id, result=verdict)

    @app.post(
        "/v1/runs/{run_id}/approvals",
        response_model=ApprovalsAnswer,
        responses={**COMMON_ERRORS, 404: {"model": ErrorResponse}, 409: {"model": ErrorResponse}},
        summary="Approve or reject pending tool calls",
    )
    async def approvals(run_id: str, body: ApprovalsBody, api: ApiDep, tenant: Tenant) -> ApprovalsAnswer:
        out: list[ApprovalVerdict] = []
        resumed = False
        key = await api.producer.resolve(run_id, tenant)
        for d in body.decisions:
            verdict = await api.producer.settle_approval(
                key, d.tool_call_id, approved=d.approved, reason=d.reason, tenant=tenant
            )
            if verdict == "unknown_run":
                raise ApiError(404, "unknown_run", f"no run {run_id}")
            if verdict == "unknown_call":
                raise ApiError(
                    404, "unknown_tool_call", f"run {run_id} has no pending tool call {d.tool_call_id}"
                )
            if verdict == "already_decided":
                raise ApiError(409, "already_decided", f"tool call {d.tool_call_id} was already decided")
            if verdict in ("not_awaiting", "moved"):
                raise ApiError(409, "not_awaiting_approval", f"run {run_id} is not waiting for approval")
            resumed = resumed or verdict == "resumed"
            out.append(ApprovalVerdict(toolCallId=d.tool_call_id, result=verdict))
        return ApprovalsAnswer(runId=run_id, results=out, resumed=resumed)

    @app.post(
        "/v1/runs/{run_id}/tool-results",
        response_model=ToolResultsAnswer,
        responses={**COMMON_ERRORS, 404: {"model": ErrorResponse}, 409: {"model": ErrorResponse}},
        summary="Post results of client tool calls (idempotent per toolCallId)",
    )
    async def tool_results(
        run_id: str, body: ToolResultsBody, api: ApiDep, tenant: Tenant
    ) -> ToolResultsAnswer:
        key = await api.producer.resolve(run_id, tenant)
        verdict, call, each = await api.producer.post_tool_results(key, body.results, tenant=tenant)
        if verdict in ("recorded", "resumed"):
            out = [
                ToolResultVerdict(toolCallId=r.tool_call_id, result=v)
                for r, v in zip(body.results, each, strict=True)
            ]
            return ToolResultsAnswer(runId=run_id, results=out, resumed=verdict == "resumed")
        status, message = {
            "unknown_run": (404, f"no run {run_id}"),
            "unknown_call": (404, f"run {run_id} has no tool call {call}"),
            "not_client": (422, f"tool call {call} is not a client tool call: its worker executes it"),
            "finished": (409, f"run {run_id} has already finished"),
            "conflict": (409, f"tool call {call} already has a different result"),
            "timed_out": (409, f"tool call {call} passed its deadline; the model was given a timeout error"),
        }.get(verdict, (409, verdict))
        code = {
            "unknown_call": "unknown_tool_call",
            "not_client": "not_client_tool",
            "finished": "run_finished",
        }
        raise ApiError(status, code.get(verdict, verdict), message)

    @app.get(
        "/v1/sessions/{session_id}",
        response_model=SessionView,
        responses={**COMMON_ERRORS, 404: {"model": ErrorResponse}},
        summary="A session's runs and history",
    )
    async def session(session_id: str, api: ApiDep, tenant: Tenant) -> dict[str, Any]:
        found = await api.producer.get_session(session_id, tenant=tenant)
        if found is None:
            raise ApiError(404, "unknown_session", f"no session {session_id}")
        return found

    @app.get("/healthz", summary="The process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", responses={503: {"model": ErrorResponse}}, summary="Redis is reachable")
    async def readyz(api: ApiDep) -> dict[str, str]:
        try:
            await asyncio.wait_for(api.redis.ping(), 2.0)
        except TimeoutError:  # up but not answering (stalled, overloaded): not ready either
            raise ApiError(
                503, "redis_unavailable", "Redis did not answer within 2 s", headers={"Retry-After": "2"}
            ) from None
        return {"status": "ready"}

    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}}},
        summary="Prometheus metrics",
    )
    async def metrics(api: ApiDep) -> Response:
        with contextlib.suppress(Exception):
            depth, awaiting = await api.producer.gauges()
            api.metrics.queue_depth.set(depth)
            api.metrics.awaiting.set(awaiting)
        body, ctype = api.metrics.render()
        return Response(body, media_type=ctype)

    from producer.api import routes_catalog, routes_ui

    app.include_router(routes_catalog.router)
    app.include_router(routes_ui.router)
    return app


def _seq(last_event_id: str | None) -> int:
    value = (last_event_id or "").strip()
    if not (value.isascii() and value.isdigit()):
        return 0
    if len(value) > 19 or int(value) > limits.MAX_SEQ:
        raise ApiError(422, "invalid_input", f"Last-Event-ID: an event seq is at most {limits.MAX_SEQ}")
    return int(value)


async def _sse(
    api: Api, request: Request, run_id: str, after: int, *, label: str | None = None
) -> AsyncIterator[bytes]:
    """Events after ``after``; a comment line while idle; ends after the terminal event."""
    last = after
    block_ms = int(min(api.sse_heartbeat_s, MAX_BLOCK_S) * 1000)
    idle_since = time.monotonic()
    yield b": connected\n\n"
    while True:
        if await request.is_disconnected():
            return
        page = await api.producer.read_events(run_id, after=last, limit=200, block_ms=block_ms, label=label)
        if not page:
            if time.monotonic() - idle_since >= api.sse_heartbeat_s:
                idle_since = time.monotonic()
                yield b": keep-alive\n\n"
            rec = await api.producer.get(run_id)
            if rec is None or (rec.status.terminal and rec.last_seq <= last):
                return  # finished, and everything it wrote has been sent (or the stream expired)
            continue
        idle_since = time.monotonic()
        for e in page:
            last = e.seq
            data = orjson.dumps(to_jsonable(e))
            yield b"id: %d\nevent: %s\ndata: %s\n\n" % (e.seq, e.kind.value.encode(), data)
            if e.terminal:
                return
