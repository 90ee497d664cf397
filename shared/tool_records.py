"""A tool call's record: the value of one field of a run's tools hash (keys.Partition.tools, call
id -> JSON), as one type for every Python reader and writer. The Lua writes the same shapes:
commit.lua the claims (in the run hash, below), tool_results.lua a client's results, prelude.lua's
client_settle the timeouts of client calls.

A record is in one of three states (``ToolState``):

- ``pending``: claimed by the worker at ``epoch``, its ``attempts``-th claim, no result yet. A
  worker that acquires the run with a pending record runs the call again (same idempotency key).
  commit.lua keeps claims in the run hash (field ``claims``: the run's open claims, JSON, written in
  the commit's one HSET of the run) rather than in the tools hash, and drops a call's claim when it
  writes the call's record; acquire.lua answers them among the records.
- ``client_pending``: offered to the caller (``client``) with the call's ``name`` and
  ``arguments``, until ``deadline_ms`` (``timeout_ms`` after the offer).
- ``done``: ``result`` recorded; served on resume and by recall, never executed again. A client
  call is done with the caller's result or, past its deadline, a timeout error (``timed_out``).
  A sub-agent call is done with its child's answer and ``usage``: what the child spent, its own
  children included (child_result.lua, shared/children.py), which the parent's budget counts.

``calledAt`` (unix ms, from the run's clock: the time of the model reply that made the call) is on
done and client records; a worker's claim (written by commit.lua before the call starts) has none.

The JSON leaves out the fields at their defaults (a claim is ``{"state", "epoch", "attempts"}``),
so reading it back gives the same record.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from agentmill_client.codec import to_jsonable
from agentmill_client.models import ToolCall, ToolResult, Usage

__all__ = ["ToolRecord", "ToolState"]


class ToolState(StrEnum):
    PENDING = "pending"
    CLIENT_PENDING = "client_pending"
    DONE = "done"


# Python name -> JSON name, in the order the record is written.
_FIELDS = (
    ("state", "state"), ("epoch", "epoch"), ("attempts", "attempts"), ("client", "client"),
    ("timed_out", "timedOut"), ("name", "name"), ("arguments", "arguments"),
    ("deadline_ms", "deadlineMs"), ("timeout_ms", "timeoutMs"), ("called_at_ms", "calledAt"),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ToolRecord:
    state: ToolState
    epoch: int = 0  # the epoch of the worker that claimed or ran the call (0: a client's)
    attempts: int = 0  # claims so far (0: a client's)
    client: bool = False  # executed by the caller, not by a worker
    timed_out: bool = False  # a client call that got no result before its deadline
    name: str = ""  # a client call's tool name and arguments, as offered
    arguments: str = ""
    deadline_ms: int = 0  # a client call's deadline (unix ms) and the timeout it came from
    timeout_ms: int = 0
    called_at_ms: int = 0  # when the model called it (unix ms, the run's clock; 0: a claim, or older records)
    result: ToolResult | None = None
    usage: Usage | None = None  # a child run's record: the child's usage with its own children's
    actor: dict[str, Any] | None = None  # a client's result: who sent it (shared.actors)

    @classmethod
    def claim(cls, epoch: int, prev: ToolRecord | None = None) -> ToolRecord:
        """The worker at ``epoch`` claims the call: one attempt more than ``prev``'s (what commit.lua writes)."""
        return cls(ToolState.PENDING, epoch, prev.attempts + 1 if prev is not None else 1)

    @classmethod
    def finished(cls, epoch: int, attempts: int, result: ToolResult, called_at_ms: int = 0) -> ToolRecord:
        return cls(ToolState.DONE, epoch, attempts, called_at_ms=called_at_ms, result=result)

    @classmethod
    def offered(cls, call: ToolCall, deadline_ms: int, timeout_ms: int, called_at_ms: int = 0) -> ToolRecord:
        """A client call offered to the caller."""
        return cls(ToolState.CLIENT_PENDING, client=True, name=call.name, arguments=call.arguments,
                   deadline_ms=deadline_ms, timeout_ms=timeout_ms, called_at_ms=called_at_ms)  # fmt: skip

    def timed_out_as(self, call_id: str) -> ToolRecord:
        """This client call past its deadline: done with a timeout error (prelude.lua client_settle)."""
        content = f"error: the client returned no result within {self.timeout_ms or '?'} ms"
        return ToolRecord(ToolState.DONE, client=True, timed_out=True, called_at_ms=self.called_at_ms,
                          result=ToolResult(tool_call_id=call_id, name=self.name, content=content, is_error=True))  # fmt: skip

    @property
    def done(self) -> bool:
        return self.state == ToolState.DONE

    @property
    def recorded(self) -> ToolResult | None:
        """The result to serve instead of executing the call: only a done record's."""
        return self.result if self.done else None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for attr, key in _FIELDS:
            v = getattr(self, attr)
            if v or attr == "state":
                d[key] = v.value if isinstance(v, ToolState) else v
        if self.result is not None:
            d["result"] = to_jsonable(self.result)
        if self.usage is not None:
            d["usage"] = to_jsonable(self.usage)
        if self.actor:
            d["actor"] = self.actor
        return d

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: Any) -> ToolRecord:
        """Raises ValueError for what is not a tool record."""
        if not isinstance(d, dict):
            raise ValueError(f"a tool record is a JSON object, not {type(d).__name__}")
        try:
            state = ToolState(str(d.get("state")))
        except ValueError:
            raise ValueError(f"a tool record's state is one of {[s.value for s in ToolState]}") from None
        raw = d.get("result")
        usage = d.get("usage")
        return cls(
            state,
            epoch=int(d.get("epoch") or 0),
            attempts=int(d.get("attempts") or 0),
            client=bool(d.get("client")),
            timed_out=bool(d.get("timedOut")),
            name=str(d.get("name") or ""),
            arguments=str(d.get("arguments") or ""),
            deadline_ms=int(d.get("deadlineMs") or 0),
            timeout_ms=int(d.get("timeoutMs") or 0),
            called_at_ms=int(d.get("calledAt") or 0),
            result=ToolResult.model_validate(raw) if isinstance(raw, dict) else None,
            usage=Usage.model_validate(usage) if isinstance(usage, dict) else None,
            actor=d["actor"] if isinstance(d.get("actor"), dict) else None,
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> ToolRecord:
        return cls.from_dict(orjson.loads(raw))
