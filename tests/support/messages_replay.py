"""Exchanges with a Messages API server (``POST /v1/messages``), recorded and replayed.

``Recorder`` stands between agentmill and a live server (LiteLLM's proxy in tests/peer): it
forwards each request and keeps the request's JSON and the raw response bytes. ``Replayer`` serves
recorded exchanges, in order, to a real worker (tests/integration/test_anthropic_replay.py), and
keeps what it was sent, to compare with what was recorded. Both are local HTTP servers (uvicorn).
Files: tests/data/anthropic_litellm/<name>.json (the exchanges of one run) with each response's
body also in <name>.<n>.sse (read by tests/unit/test_anthropic_stream.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support.local_app import LocalApp

DATA = Path(__file__).resolve().parents[1] / "data" / "anthropic_litellm"
MAX_BODY = 4 * 1024 * 1024


@dataclass
class Exchange:
    request: dict[str, Any]
    status: int
    content_type: str
    body: bytes


def save(name: str, run: dict[str, Any], exchanges: list[Exchange]) -> None:
    """``run``: what the run was (its profile's provider, its RunInput), to run it again."""
    DATA.mkdir(parents=True, exist_ok=True)
    for old in DATA.glob(f"{name}.*"):
        old.unlink()
    rows = []
    for i, x in enumerate(exchanges):
        rows.append({"request": x.request, "status": x.status, "contentType": x.content_type})
        (DATA / f"{name}.{i}.sse").write_bytes(x.body)
    doc = {"run": run, "exchanges": rows}
    (DATA / f"{name}.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")


def names() -> list[str]:
    return sorted(p.stem for p in DATA.glob("*.json"))


def load(name: str) -> tuple[dict[str, Any], list[Exchange]]:
    doc = orjson.loads((DATA / f"{name}.json").read_bytes())
    return doc["run"], [
        Exchange(r["request"], r["status"], r["contentType"], (DATA / f"{name}.{i}.sse").read_bytes())
        for i, r in enumerate(doc["exchanges"])
    ]


class _Server(LocalApp):
    def __init__(self) -> None:
        super().__init__([Route("/v1/messages", self.messages, methods=["POST"])])

    @property
    def base_url(self) -> str:
        return f"{self.origin}"

    async def messages(self, request: Request) -> Response:
        raise NotImplementedError


class Recorder(_Server):
    """Forwards to ``upstream`` (a Messages API base URL); ``exchanges`` in the order answered.
    The replies numbered in ``cut`` (0 the first) are read whole, then passed on (and kept) only up
    to their ``message_delta``: a stream cut off on its way, with no stop reason or end."""

    def __init__(self, upstream: str, client: httpx.AsyncClient, cut: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.upstream = upstream.rstrip("/")
        self.client = client
        self.cut = cut
        self.exchanges: list[Exchange] = []

    async def messages(self, request: Request) -> Response:
        raw = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("x-api-key", "anthropic-version",
                                                                               "content-type", "accept")}  # fmt: skip
        req = self.client.build_request("POST", f"{self.upstream}/v1/messages", content=raw, headers=headers)
        resp = await self.client.send(req, stream=True)
        x = Exchange(orjson.loads(raw), resp.status_code, resp.headers.get("content-type", ""), b"")
        self.exchanges.append(x)
        if len(self.exchanges) - 1 in self.cut:
            whole = await resp.aread()
            await resp.aclose()
            end = whole.find(b"event: message_delta")
            x.body = whole[: end if end > 0 else len(whole) // 2]
            return StreamingResponse(
                iter([x.body]), status_code=resp.status_code, media_type=x.content_type or None
            )

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.aiter_bytes():
                    x.body += chunk
                    yield chunk
            finally:
                await resp.aclose()

        return StreamingResponse(body(), status_code=resp.status_code, media_type=x.content_type or None)


class Replayer(_Server):
    """Answers the n-th request with the n-th recorded response, split in small pieces; ``seen``
    holds what each request sent."""

    def __init__(self, exchanges: list[Exchange], piece: int = 61) -> None:
        super().__init__()
        self.exchanges = exchanges
        self.piece = piece
        self.seen: list[dict[str, Any]] = []

    async def messages(self, request: Request) -> Response:
        raw = await request.body()
        if len(raw) > MAX_BODY:
            return Response(status_code=413)
        self.seen.append(orjson.loads(raw))
        if len(self.seen) > len(self.exchanges):
            err = {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": "no more recorded replies"},
            }
            return Response(orjson.dumps(err), status_code=400, media_type="application/json")
        x = self.exchanges[len(self.seen) - 1]

        async def body() -> AsyncIterator[bytes]:
            for i in range(0, len(x.body), self.piece):
                yield x.body[i : i + self.piece]
                await asyncio.sleep(0)

        return StreamingResponse(body(), status_code=x.status, media_type=x.content_type or None)
