"""Python clients of the HTTP API: ``AsyncClient`` and ``Client`` (httpx), typed with the shared models.

``events(run_id, after=…)`` yields every event once, in order, and reconnects from the last seq it
yielded when the connection drops or the API restarts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from typing import Any

import httpx
import orjson

from shared.api import AbortAnswer, Accepted, ApprovalsAnswer, BatchItem, RunView
from shared.codec import to_jsonable
from shared.models import RunEvent, RunInput


class ApiError(Exception):
    """An error answer of the API, with its stable ``code``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def _body(run: RunInput | dict[str, Any]) -> dict[str, Any]:
    return to_jsonable(run) if isinstance(run, RunInput) else run


def _check(resp: httpx.Response) -> Any:
    if resp.status_code >= 400:
        try:
            err = resp.json()["error"]
            raise ApiError(resp.status_code, err.get("code", "error"), err.get("message", resp.text))
        except (ValueError, KeyError, TypeError):
            raise ApiError(resp.status_code, "http_error", resp.text[:500]) from None
    return resp.json()


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class AsyncClient:
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=_headers(token), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def submit(self, run: RunInput | dict[str, Any], *, idempotency_key: str | None = None) -> Accepted:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return Accepted.model_validate(
            _check(await self.http.post("/v1/runs", json=_body(run), headers=headers))
        )

    async def submit_batch(
        self, runs: Sequence[RunInput | dict[str, Any]], *, webhook: str | None = None
    ) -> list[BatchItem]:
        """One answer per run, in order: ``runId`` when accepted, else ``error`` (code, message, field)."""
        body: dict[str, Any] = {"runs": [_body(r) for r in runs]}
        if webhook:
            body["webhook"] = webhook
        answer = _check(await self.http.post("/v1/runs/batch", json=body))
        return [BatchItem.model_validate(r) for r in answer["results"]]

    async def get(self, run_id: str) -> RunView:
        return RunView.model_validate(_check(await self.http.get(f"/v1/runs/{run_id}")))

    async def wait(self, run_id: str, *, timeout: float = 60.0) -> RunView:  # noqa: ASYNC109 - server-side long poll
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, min(55.0, deadline - time.monotonic()))
            view = RunView.model_validate(
                _check(
                    await self.http.get(
                        f"/v1/runs/{run_id}/wait", params={"timeout": left}, timeout=left + 10
                    )
                )
            )
            if view.status in ("completed", "failed", "aborted") or time.monotonic() >= deadline:
                return view

    async def events(
        self, run_id: str, *, after: int = 0, retry_s: float = 0.5, give_up_s: float = 60.0
    ) -> AsyncGenerator[RunEvent, None]:
        """Every event after ``after``, once, in order; ends after the terminal event."""
        last = after
        down_since: float | None = None
        while True:
            try:
                async with self.http.stream(
                    "GET",
                    f"/v1/runs/{run_id}/events",
                    params={"after": last},
                    timeout=httpx.Timeout(30.0, read=None),
                ) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        _check(resp)
                    down_since = None
                    async for event in _parse_sse(resp):
                        if event.seq <= last:
                            continue
                        last = event.seq
                        yield event
                        if event.terminal:
                            return
                # The stream ended without a terminal event (server restarting): reconnect.
            except (httpx.TransportError, httpx.RemoteProtocolError):
                pass
            if down_since is None:
                down_since = time.monotonic()
            elif time.monotonic() - down_since > give_up_s:
                raise ApiError(503, "unreachable", f"the API was unreachable for {give_up_s:.0f} s")
            await asyncio.sleep(retry_s)

    async def abort(self, run_id: str) -> AbortAnswer:
        return AbortAnswer.model_validate(_check(await self.http.post(f"/v1/runs/{run_id}/abort")))

    async def approve(self, run_id: str, tool_call_id: str, *, reason: str | None = None) -> ApprovalsAnswer:
        return await self._decide(run_id, tool_call_id, True, reason)

    async def reject(self, run_id: str, tool_call_id: str, *, reason: str | None = None) -> ApprovalsAnswer:
        return await self._decide(run_id, tool_call_id, False, reason)

    async def _decide(
        self, run_id: str, tool_call_id: str, approved: bool, reason: str | None
    ) -> ApprovalsAnswer:
        d: dict[str, Any] = {"toolCallId": tool_call_id, "approved": approved}
        if reason:
            d["reason"] = reason
        answer = _check(await self.http.post(f"/v1/runs/{run_id}/approvals", json={"decisions": [d]}))
        return ApprovalsAnswer.model_validate(answer)


async def _parse_sse(resp: httpx.Response) -> AsyncIterator[RunEvent]:
    data: list[str] = []
    async for line in resp.aiter_lines():
        if line == "":
            if data:
                yield RunEvent.model_validate(orjson.loads("\n".join(data)))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


class Client:
    """The blocking client: the same calls as AsyncClient, run on a private event loop."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        self._loop = asyncio.new_event_loop()
        self._async = AsyncClient(base_url, token=token, timeout=timeout)

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        self._run(self._async.aclose())
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, run: RunInput | dict[str, Any], *, idempotency_key: str | None = None) -> Accepted:
        return self._run(self._async.submit(run, idempotency_key=idempotency_key))  # type: ignore[no-any-return]

    def submit_batch(
        self, runs: Sequence[RunInput | dict[str, Any]], *, webhook: str | None = None
    ) -> list[BatchItem]:
        return self._run(self._async.submit_batch(runs, webhook=webhook))  # type: ignore[no-any-return]

    def get(self, run_id: str) -> RunView:
        return self._run(self._async.get(run_id))  # type: ignore[no-any-return]

    def wait(self, run_id: str, *, timeout: float = 60.0) -> RunView:
        return self._run(self._async.wait(run_id, timeout=timeout))  # type: ignore[no-any-return]

    def events(self, run_id: str, *, after: int = 0) -> Iterator[RunEvent]:
        agen = self._async.events(run_id, after=after)
        try:
            while True:
                try:
                    yield self._run(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._run(agen.aclose())

    def abort(self, run_id: str) -> AbortAnswer:
        return self._run(self._async.abort(run_id))  # type: ignore[no-any-return]

    def approve(self, run_id: str, tool_call_id: str, *, reason: str | None = None) -> ApprovalsAnswer:
        return self._run(self._async.approve(run_id, tool_call_id, reason=reason))  # type: ignore[no-any-return]

    def reject(self, run_id: str, tool_call_id: str, *, reason: str | None = None) -> ApprovalsAnswer:
        return self._run(self._async.reject(run_id, tool_call_id, reason=reason))  # type: ignore[no-any-return]
