"""What goes on the wire for the clients: request bodies and headers, listing query parameters,
error answers (raised as ApiError) and Server-Sent Events read back as RunEvents."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson

from agentmill_client.codec import to_jsonable
from agentmill_client.errors import ApiError
from agentmill_client.models import RunEvent, RunInput

__all__ = ["body", "check", "headers", "listing_params", "parse_sse"]


def body(run: RunInput | dict[str, Any]) -> dict[str, Any]:
    return to_jsonable(run) if isinstance(run, RunInput) else run


def check(resp: httpx.Response) -> Any:
    if resp.status_code >= 400:
        kept = {h: resp.headers[h] for h in ("Retry-After", "WWW-Authenticate") if h in resp.headers}
        try:
            err = resp.json()["error"]
            code, message = err.get("code", "error"), err.get("message", resp.text)
        except (ValueError, KeyError, TypeError, AttributeError):
            code, message = "http_error", resp.text[:500]
        raise ApiError(resp.status_code, code, message, headers=kept or None)
    return resp.json()


def headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def listing_params(
    status: str | None,
    agent: str | None,
    session_id: str | None,
    batch_id: str | None,
    metadata: dict[str, Any] | None,
    created_after: int | None,
    created_before: int | None,
    parent_run_id: str | None = None,
) -> list[tuple[str, str | int | float | bool | None]]:
    out: list[tuple[str, str | int | float | bool | None]] = []
    for name, value in (("status", status), ("agent", agent), ("sessionId", session_id), ("batchId", batch_id),
                        ("createdAfter", created_after), ("createdBefore", created_before),
                        ("parentRunId", parent_run_id)):  # fmt: skip
        if value is not None:
            out.append((name, str(value)))
    for k, v in (metadata or {}).items():
        text = (
            ("true" if v else "false")
            if isinstance(v, bool)
            else v
            if isinstance(v, str)
            else orjson.dumps(v).decode()
        )
        out.append(("metadata", f"{k}={text}"))
    return out


async def parse_sse(resp: httpx.Response) -> AsyncIterator[RunEvent]:
    data: list[str] = []
    async for line in resp.aiter_lines():
        if line == "":
            if data:
                yield RunEvent.model_validate(orjson.loads("\n".join(data)))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
