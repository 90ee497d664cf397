"""An HTTP server that answers as llama-cpp-python's server did: the recordings of
tests/data/llama_cpp/ (tests/peer/llama.py) replayed byte for byte, chosen by the shape of the
request. A ``response_format`` of type ``json_schema`` gets the recorded refusal (500), one of type
``json_object`` the recorded structured answer, anything else the recorded chat answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.peer import llama
from tests.support.local_app import LocalApp

__all__ = ["LlamaReplay", "recording_for"]


def recording_for(body: dict[str, Any]) -> str:
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        return "json_schema_refused" if fmt.get("type") == "json_schema" else "structured_stream"
    return "chat_stream"


class LlamaReplay(LocalApp):
    def __init__(self) -> None:
        self.recordings = llama.load()
        self.requests: list[dict[str, Any]] = []
        super().__init__([Route("/v1/chat/completions", self.completions, methods=["POST"])])

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    async def completions(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.requests.append(body)
        t = self.recordings[recording_for(body)]
        if t.status != 200:
            return Response(t.body, status_code=t.status, media_type=t.content_type)

        async def chunks() -> AsyncIterator[bytes]:
            for i in range(0, len(t.body), 97):
                yield t.body[i : i + 97]
                await asyncio.sleep(0)

        return StreamingResponse(chunks(), media_type=t.content_type)
