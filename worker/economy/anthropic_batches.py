"""Anthropic's Message Batches as a ``BatchProvider``: one ``POST /v1/messages/batches`` carries
the requests (``{custom_id, params}``; nothing is uploaded first), ``processing_status`` says when
it has ``ended``, and the results are JSONL at the batch's ``results_url``, one line per request:
``succeeded`` (a ``message``), ``errored``, ``canceled`` or ``expired``.

A batch takes no metadata, so a create whose answer was lost cannot be found again by its tag
(``find`` answers None): a batcher killed after sending the create and before keeping the batch's
id (one Redis write later) has its successor create it again. Those requests are then answered
twice by the provider (and billed twice); each run still records one answer per call (the first
delivered; the other is discarded as a duplicate).
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from worker.economy.provider import BatchReply, BatchStatus
from worker.economy.wire import wire_custom_id
from worker.models.anthropic import ANTHROPIC_VERSION

__all__ = ["AnthropicBatches"]

_ERRORS = {"canceled": "cancelled", "expired": "expired"}


class AnthropicBatches:
    uploads = False

    def __init__(self, base_url: str, api_key: str | None, client: httpx.AsyncClient | None = None) -> None:
        headers = {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": api_key} if api_key else {})}
        base = base_url.rstrip("/")
        self.url = base + ("/messages/batches" if base.endswith("/v1") else "/v1/messages/batches")
        self.http = client or httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60.0, connect=5.0))

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _json(self, method: str, url: str, **kw: Any) -> Any:
        r = await self.http.request(method, url, **kw)
        r.raise_for_status()
        return r.json()

    async def upload(self, lines: list[bytes], tag: str) -> str:
        return "inline"  # the requests go with the create

    async def create(self, upload_id: str, tag: str, lines: list[bytes]) -> str:
        requests = [orjson.loads(line) for line in lines]
        body = orjson.dumps({"requests": requests})
        got = await self._json("POST", self.url, content=body, headers={"Content-Type": "application/json"})
        return str(got["id"])

    async def find(self, tag: str) -> str | None:
        return None  # a Message Batch has no label to be found by (see the module's docstring)

    async def status(self, provider_id: str) -> BatchStatus:
        b = await self._json("GET", f"{self.url}/{provider_id}")
        counts = {k: int(v) for k, v in (b.get("request_counts") or {}).items()}
        state = str(b["processing_status"])
        return BatchStatus(state, state == "ended", counts)

    async def results(self, provider_id: str, ids: list[str]) -> dict[str, BatchReply]:
        b = await self._json("GET", f"{self.url}/{provider_id}")
        if not b.get("results_url"):
            return {}
        r = await self.http.get(str(b["results_url"]))
        r.raise_for_status()
        ours = {wire_custom_id(cid): cid for cid in ids}
        out: dict[str, BatchReply] = {}
        for raw in r.content.splitlines():
            if raw.strip():
                line = orjson.loads(raw)
                cid = ours.get(str(line.get("custom_id")))
                if cid is not None:
                    out[cid] = _reply(line.get("result") or {})
        return out

    async def cancel(self, provider_id: str) -> None:
        r = await self.http.post(f"{self.url}/{provider_id}/cancel")
        if r.status_code != 409:  # 409: it had ended already
            r.raise_for_status()


def _reply(result: dict[str, Any]) -> BatchReply:
    kind = str(result.get("type") or "")
    if kind == "succeeded" and isinstance(result.get("message"), dict):
        return BatchReply(body=result["message"])
    if kind in _ERRORS:
        return BatchReply(error=_ERRORS[kind])
    err = (result.get("error") or {}).get("error") or {}
    return BatchReply(error=f"failed: {err.get('type') or kind or 'error'}")
