"""Reading a run's event stream. Entry ids are ``<seq>-0``; fields: seq, kind, ts, payload (JSON), epoch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentmill_client.models import EventKind, RunEvent
from shared import payload_crypto

__all__ = ["decode_entry", "stream_id"]


def stream_id(seq: int) -> str:
    return f"{seq}-0"


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def decode_entry(run_id: str, fields: Mapping[Any, Any]) -> RunEvent:
    f = {_s(k): v for k, v in fields.items()}
    return RunEvent(
        run_id=run_id,
        seq=int(f["seq"]),
        kind=EventKind(_s(f["kind"])),
        payload=payload_crypto.loads(f["payload"]),
        ts=int(f["ts"]),
    )
