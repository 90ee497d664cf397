"""A retry's or fork's initial checkpoint payload: what the new run starts from instead of its input,
read from the original run by the producer and kept in the new run's hash (``RunField.ORIGIN``,
written by submit_restored.lua) until the worker that starts it turns it into the machine's
``Restored`` event (worker/runner/opening.py). The original's recorded tool results travel beside
it, copied into the new run's tools hash by the same script.

- a retry: ``checkpoint``, the original's last checkpoint (``{"seq", "state"}``), and no events;
- a fork: ``checkpoint``, the state at ``atSeq`` the producer rebuilt (worker.machine.origin), no
  events, and ``append``, the messages the fork adds.

Forks made before kept ``events``, the original's events up to ``atSeq`` (kind, payload), its last
checkpoint for what they do not say, and, when the original was itself a retry or fork, its own
origin (``parent``): each fork of a fork carried the chain before it. Such origins are still read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["Origin"]


@dataclass(frozen=True, slots=True)
class Origin:
    lineage: dict[str, Any]  # {"retryOf": id} or {"forkOf": id, "atSeq": n}, the ids its client knows
    checkpoint: dict[str, Any] | None = None  # the original's last checkpoint (None: it has none)
    events: list[tuple[str, dict[str, Any]]] | None = None  # a fork: the events to rebuild from
    append: list[dict[str, Any]] = field(default_factory=list)  # a fork's messages (Message JSON)
    parent: dict[str, Any] | None = None  # a fork's: the forked run's own origin, when it had one

    def to_dict(self) -> dict[str, Any]:
        return {
            "lineage": self.lineage,
            "checkpoint": self.checkpoint,
            "events": None if self.events is None else [[k, p] for k, p in self.events],
            "append": self.append,
            "parent": self.parent,
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Origin:
        events = d.get("events")
        return cls(
            lineage=dict(d.get("lineage") or {}),
            checkpoint=d.get("checkpoint"),
            events=None if events is None else [(str(k), dict(p)) for k, p in events],
            append=list(d.get("append") or []),
            parent=d.get("parent"),
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> Origin:
        return cls.from_dict(orjson.loads(raw))
