"""OpenAI's Batch API as a ``BatchProvider``: the input uploaded to ``/v1/files`` (purpose ``batch``),
the batch created at ``/v1/batches`` with the batcher's tag in its metadata (so a create whose
answer was lost is found again rather than made twice), its output and error files read back."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from worker.economy.provider import BatchReply, BatchStatus, LostCreate

__all__ = ["TAG_FIELD", "OpenAIBatches"]

TAG_FIELD = "agentmill_batch"  # the metadata key holding the batcher's tag
_DONE = frozenset({"completed", "failed", "expired", "cancelled"})
_LIST_PAGES = 20  # batches listed (100 a page) when looking for a lost create: the newest first


class OpenAIBatches:
    uploads = True

    def __init__(self, base_url: str, api_key: str | None, client: httpx.AsyncClient | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base = base_url.rstrip("/")
        self.http = client or httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60.0, connect=5.0))

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _json(self, method: str, path: str, **kw: Any) -> Any:
        r = await self.http.request(method, self.base + path, **kw)
        r.raise_for_status()
        return r.json()

    async def upload(self, lines: list[bytes], tag: str) -> str:
        content = b"".join(line + b"\n" for line in lines)
        got = await self._json(
            "POST",
            "/files",
            files={"file": (f"{tag}.jsonl", content, "application/jsonl")},
            data={"purpose": "batch"},
        )
        return str(got["id"])

    async def create(self, upload_id: str, tag: str, lines: list[bytes]) -> str:
        body = {
            "input_file_id": upload_id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            "metadata": {TAG_FIELD: tag},
        }
        return str((await self._json("POST", "/batches", json=body))["id"])

    async def find(self, tag: str, lost: LostCreate) -> str | None:
        after: str | None = None
        for _ in range(_LIST_PAGES):
            page = await self._json(
                "GET", "/batches", params={"limit": 100, **({"after": after} if after else {})}
            )
            for b in page.get("data") or []:
                if (b.get("metadata") or {}).get(TAG_FIELD) == tag:
                    return str(b["id"])
            if not page.get("has_more"):
                return None
            after = page.get("last_id")
        return None

    async def status(self, provider_id: str) -> BatchStatus:
        b = await self._json("GET", f"/batches/{provider_id}")
        counts = {k: int(v) for k, v in (b.get("request_counts") or {}).items()}
        return BatchStatus(str(b["status"]), b["status"] in _DONE, counts)

    async def results(self, provider_id: str, ids: list[str]) -> dict[str, BatchReply]:
        b = await self._json("GET", f"/batches/{provider_id}")
        out: dict[str, BatchReply] = {}
        for fid in (b.get("output_file_id"), b.get("error_file_id")):
            if not fid:
                continue
            r = await self.http.get(f"{self.base}/files/{fid}/content")
            r.raise_for_status()
            for raw in r.content.splitlines():
                if raw.strip():
                    line = orjson.loads(raw)
                    out[str(line.get("custom_id"))] = _reply(line)
        if b["status"] == "failed" and not out:  # refused whole: its requests have no line at all
            errors = ((b.get("errors") or {}).get("data") or [{}])[0]
            reason = f"failed: {errors.get('code') or 'batch refused'}"
            return {"*": BatchReply(error=reason)}
        return out

    async def cancel(self, provider_id: str) -> None:
        r = await self.http.post(f"{self.base}/batches/{provider_id}/cancel")
        if r.status_code != 409:  # 409: it had ended already
            r.raise_for_status()


def _reply(line: dict[str, Any]) -> BatchReply:
    resp, err = line.get("response"), line.get("error")
    if isinstance(resp, dict) and resp.get("status_code") == 200 and isinstance(resp.get("body"), dict):
        return BatchReply(body=resp["body"])
    if isinstance(err, dict):
        code = str(err.get("code") or "error")
        return BatchReply(
            error={"batch_expired": "expired", "batch_cancelled": "cancelled"}.get(code, f"failed: {code}")
        )
    status = resp.get("status_code") if isinstance(resp, dict) else None
    return BatchReply(error=f"http {status}")
