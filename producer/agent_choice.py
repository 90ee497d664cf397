"""Which version of a tenant's agent a new run gets, pure: the one it asks for (``name@n`` or
agentVersion), else the ramped version for the runs whose id falls in the ramp's share, else the
current one. The share is chosen from a hash of the agent's name and the run id, so a run id always
gets the same answer and ids spread evenly: a ramp of p % takes p % of new runs, give or take the
binomial spread (10 % of 2,000 runs: 200, sd 13)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from producer.submission import SubmissionError
from shared.profiles import AgentProfile

__all__ = ["BUCKETS", "AgentChoice", "Pointers", "Ramp", "in_ramp"]

BUCKETS = 10_000  # a ramp's percent has two decimals


@dataclass(frozen=True, slots=True)
class Ramp:
    version: int
    percent: float


@dataclass(frozen=True, slots=True)
class Pointers:
    """An agent's state as kept (shared/lua/agent_create.lua, agent_point.lua)."""

    latest: int
    current: int | None
    ramp: Ramp | None
    created: tuple[int, ...]  # each version's creation time (ms), version 1 first
    created_at: int
    updated_at: int
    deleted: bool = False

    @classmethod
    def parse(cls, d: dict[str, Any]) -> Pointers:
        r = d.get("ramp")
        created = d.get("created") or []
        return cls(
            latest=int(d.get("latest", 0)),
            current=int(c) if (c := d.get("current")) is not None else None,
            ramp=Ramp(int(r["version"]), float(r["percent"])) if isinstance(r, dict) else None,
            created=tuple(int(x) for x in (created if isinstance(created, list) else created.values())),
            created_at=int(d.get("createdAt", 0)),
            updated_at=int(d.get("updatedAt", 0)),
            deleted=bool(d.get("deleted")),
        )

    def view(self) -> dict[str, Any]:
        return {
            "currentVersion": self.current,
            "latestVersion": self.latest,
            "ramp": None
            if self.ramp is None
            else {"version": self.ramp.version, "percent": self.ramp.percent},
            "versions": [{"version": i + 1, "createdAt": at} for i, at in enumerate(self.created)],
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }


def in_ramp(name: str, run_id: str, percent: float) -> bool:
    """Whether the run id falls in the ramp's share of the agent's new runs."""
    digest = hashlib.blake2b(f"{name}\0{run_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % BUCKETS < round(percent * BUCKETS / 100)


@dataclass(frozen=True, slots=True)
class AgentChoice:
    """A tenant's agent as a submission found it: its pointers, the version asked for (None: the
    current or ramped one) and the profiles of the versions it may give."""

    name: str
    pointers: Pointers
    asked: int | None
    profiles: dict[int, AgentProfile] = field(default_factory=dict)
    refusal: SubmissionError | None = None  # why a run naming it is refused (one item of a batch)

    def version_for(self, run_id: str) -> int:
        if self.asked is not None:
            return self.asked
        p = self.pointers
        if p.ramp is not None and in_ramp(self.name, run_id, p.ramp.percent):
            return p.ramp.version
        assert p.current is not None
        return p.current

    def wanted(self) -> list[int]:
        """The versions a run of this choice may get."""
        if self.asked is not None:
            return [self.asked]
        p = self.pointers
        return sorted({v for v in (p.current, p.ramp.version if p.ramp else None) if v is not None})
