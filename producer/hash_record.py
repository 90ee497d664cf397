"""A run's record (producer.run_record.RunRecord) from its hash's fields (RUN_FIELDS), with what
its status needs read besides: the client tool calls still open of a run awaiting tools, the
economy lane's wait of a run awaiting its model."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from agentmill_client import limits
from agentmill_client.models import RunResult, RunStatus
from producer.economy_view import economy_wait
from producer.run_record import RunRecord, lineage_view, usage_of
from shared import keys, payload_crypto
from shared.fields import RunField
from shared.script_sending import Parts
from shared.tool_records import ToolRecord

__all__ = ["record_of"]

F = RunField


async def record_of(
    parts: Parts, run_id: str, part: keys.Partition, h: dict[RunField, str | None]
) -> RunRecord:
    """The record of the run ``run_id`` on ``part`` from its hash's fields ``h`` (RUN_FIELDS),
    with what its status needs read besides (its client calls still open, its economy wait)."""
    status = RunStatus(h[F.STATUS] or RunStatus.QUEUED.value)
    result = RunResult.model_validate(payload_crypto.loads(raw)) if (raw := h[F.RESULT]) else None
    pending: list[dict[str, Any]] = []
    if status == RunStatus.AWAITING_HUMAN and (approvals := h[F.APPROVALS]):
        for call_id, entry in payload_crypto.loads(approvals).items():
            if entry.get("decision") == "pending":
                pending.append(
                    {
                        "toolCallId": call_id,
                        "name": entry.get("name"),
                        "arguments": entry.get("arguments"),
                    }
                )
    calls: list[dict[str, Any]] = []
    if status == RunStatus.AWAITING_TOOLS and (offered := h[F.CLIENT_PENDING]):
        calls = payload_crypto.loads(offered)

        async def tools(c: Redis) -> list[Any]:
            return list(await c.hmget(part.tools(run_id), [c_["toolCallId"] for c_ in calls]))  # type: ignore[misc]

        recs = await parts.call(part, tools)
        calls = [
            c
            for c, r in zip(calls, recs, strict=True)
            if r and not ToolRecord.from_json(payload_crypto.open_bytes(r)).done
        ]
    waiting = None
    if status == RunStatus.AWAITING_MODEL and (wait := h[F.MODEL_WAIT]):
        waiting = await economy_wait(parts, wait)
    return RunRecord(
        run_id=run_id,
        status=status,
        tenant=h[F.TENANT] or "",
        session_id=h[F.SESSION_ID] or None,
        created_at_ms=int(h[F.CREATED_AT] or 0),
        last_seq=int(h[F.LAST_SEQ] or 0),
        result=result,
        pending_approvals=pending,
        abort_requested=bool(h[F.ABORT]),
        pending_tool_calls=calls,
        stream_key=part.events(run_id),
        client_session=h[F.CLIENT_SESSION] or "",
        parent_run_id=h[F.PARENT_RUN] or "",
        parent_tool_call_id=h[F.PARENT_CALL] or "",
        had_children=h[F.CHILDREN] is not None,
        lineage=lineage_view(h[F.LINEAGE] or "", h[F.RETRIED_BY] or ""),
        priority=int(h[F.PRIORITY] or limits.DEFAULT_PRIORITY),
        run_at_ms=int(at) if (at := h[F.RUN_AT]) else None,
        usage=usage_of(h),
        archived=h[F.ARCHIVED] == "1",
        agent=h[F.AGENT] or "",
        agent_version=int(v) if (v := h[F.AGENT_VERSION]) else None,
        waiting_for=h[F.WAITING_FOR] or "",
        economy_wait=waiting,
    )
