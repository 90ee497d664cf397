"""Anthropic's Message Batches as a ``BatchProvider``: one ``POST /v1/messages/batches`` carries
the requests (``{custom_id, params}``; nothing is uploaded first), ``processing_status`` says when
it has ``ended``, and the results are JSONL at the batch's ``results_url``, one line per request:
``succeeded`` (a ``message``), ``errored``, ``canceled`` or ``expired``.

A batch takes no metadata, so a create whose answer was lost (the batcher killed after sending it,
before keeping the batch's id) is found by what is known of it instead (``find``): the one batch
created since it was closed, with its number of requests, that is none of the endpoint's other
batches. Another client of the same workspace creating a batch of that size in that window makes
it ambiguous (then it is created again: those requests answered, and billed, twice; each run
still records one answer per call); adopting another client's batch by mistake finds none of
agentmill's custom_ids in its results, so those calls go to the standard lane: never a wrong answer.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import httpx
import orjson

from worker.economy.provider import BatchReply, BatchStatus, LostCreate
from worker.economy.wire import wire_custom_id
from worker.models.anthropic import ANTHROPIC_VERSION

__all__ = ["AnthropicBatches"]

_ERRORS = {"canceled": "cancelled", "expired": "expired"}
_LIST_PAGES = 20  # batches listed (100 a page) when looking for a lost create: the newest first
_SKEW_MS = 60_000  # the provider's clock against Redis's


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

    async def find(self, tag: str, lost: LostCreate) -> str | None:
        """A Message Batch has no tag: the one batch created since the lost one was closed, with its
        number of requests, that is none of the endpoint's other batches (several such: None)."""
        found: list[str] = []
        after: str | None = None
        for _ in range(_LIST_PAGES):
            page = await self._json(
                "GET", self.url, params={"limit": 100, **({"after_id": after} if after else {})}
            )
            for b in page.get("data") or []:
                created = dt.datetime.fromisoformat(str(b["created_at"])).timestamp() * 1000
                if created < lost.since_ms - _SKEW_MS:  # newest first: none older can be it
                    return found[0] if len(found) == 1 else None
                total = sum(int(v) for v in (b.get("request_counts") or {}).values())
                if total == lost.requests and str(b["id"]) not in lost.known:
                    found.append(str(b["id"]))
            if not page.get("has_more"):
                break
            after = page.get("last_id")
        return found[0] if len(found) == 1 else None

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
