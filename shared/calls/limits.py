"""Calls of the provider limiter's scripts on one model endpoint's keys (worker/adapters/limiter.py)
and of the rate keys' starts (producer/rate_keys.py). The endpoint's calls take no partition: their
keys are the endpoint's (shared.endpoint_keys), all in its one slot."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shared import endpoint_keys
from shared.calls.base import KEY_ONLY, ScriptCall
from shared.keys import Partition

__all__ = [
    "CapacityAcquire",
    "CapacityPause",
    "CapacityRelease",
    "CapacityRenew",
    "CapacityVerdict",
    "RateSlots",
]


class CapacityVerdict(StrEnum):
    """Why a call may not start yet (the reply's second element; its first is the wait hint ms)."""

    CONCURRENCY = "concurrency"  # maxConcurrent
    REQUESTS = "requests"  # requestsPerMinute
    TOKENS = "tokens"  # tokensPerMinute
    PAUSED = "paused"  # a 429's Retry-After pause
    OK = "ok"  # granted


@dataclass(frozen=True, slots=True)
class CapacityAcquire(ScriptCall):
    """capacity_acquire.lua: one attempt to take the endpoint's capacity for a call of ``tokens``;
    answers {wait hint ms (0: granted), verdict, its rank in the endpoint's line (-1: none)}."""

    SCRIPT = "capacity_acquire"
    KEY_NAMES = ("slots", "requests", "tokens", "pause", "waiting", "seen")
    VERDICT = CapacityVerdict

    endpoint: str = field(metadata=KEY_ONLY)  # the endpoint's hash (endpoint_keys.endpoint_hash)
    holder: str
    lease_ms: int
    max_concurrent: int  # 0 = no such limit, as the three below
    rpm: int
    tpm: int
    tokens: int
    window_ms: int
    priority: int | None  # the run's; None: not in the line (served as it polls)
    aging_ms: int  # the aging quantum
    stale_ms: int  # after how long a waiter that stopped asking leaves the line

    def keys(self, part: Any = None) -> list[str]:
        e = self.endpoint
        return [endpoint_keys.provider_slots_key(e), endpoint_keys.provider_requests_key(e),
                endpoint_keys.provider_tokens_key(e), endpoint_keys.provider_pause_key(e),
                endpoint_keys.provider_waiting_key(e), endpoint_keys.provider_seen_key(e)]  # fmt: skip

    @classmethod
    def verdict(cls, reply: Any) -> CapacityVerdict:
        """The reply's verdict: its second element (its first is the wait hint)."""
        v = reply[1]
        return CapacityVerdict(v.decode() if isinstance(v, bytes) else str(v))


@dataclass(frozen=True, slots=True)
class CapacityRelease(ScriptCall):
    """capacity_release.lua: a call's slot freed and its tokens counted as used (``actual_tokens``:
    -1 keeps the estimate); with ``leaving``, a waiter that gives up leaves the line too."""

    SCRIPT = "capacity_release"
    KEY_NAMES = ("slots", "tokens", "waiting", "seen")  # the last two only when leaving

    endpoint: str = field(metadata=KEY_ONLY)
    leaving: bool = field(metadata=KEY_ONLY)
    holder: str
    estimated_tokens: int
    actual_tokens: int

    def keys(self, part: Any = None) -> list[str]:
        e = self.endpoint
        out = [endpoint_keys.provider_slots_key(e), endpoint_keys.provider_tokens_key(e)]
        if self.leaving:
            out += [endpoint_keys.provider_waiting_key(e), endpoint_keys.provider_seen_key(e)]
        return out


@dataclass(frozen=True, slots=True)
class CapacityRenew(ScriptCall):
    """capacity_renew.lua: a live call's slot extended by ``lease_ms`` (put back if it had expired)."""

    SCRIPT = "capacity_renew"
    KEY_NAMES = ("slots",)

    endpoint: str = field(metadata=KEY_ONLY)
    holder: str
    lease_ms: int

    def keys(self, part: Any = None) -> list[str]:
        return [endpoint_keys.provider_slots_key(self.endpoint)]


@dataclass(frozen=True, slots=True)
class CapacityPause(ScriptCall):
    """capacity_pause.lua: no call to the endpoint starts for ``ms`` (a longer pause stays); answers
    the pause's ms from now."""

    SCRIPT = "capacity_pause"
    KEY_NAMES = ("pause",)

    endpoint: str = field(metadata=KEY_ONLY)
    ms: int

    def keys(self, part: Any = None) -> list[str]:
        return [endpoint_keys.provider_pause_key(self.endpoint)]


@dataclass(frozen=True, slots=True)
class RateSlots(ScriptCall):
    """rate_slots.lua: the starts rate keys give runs, on one partition: per run its rate key (a
    KEY each, in order) and runId, limit, period ms (``runs``, three arguments a run); answers
    per run its start ms ('0': now, '-1': refused, the key holds ``most`` starts ahead)."""

    SCRIPT = "rate_slots"
    KEY_NAMES = ()  # one rate key per run (keys.Partition.rate_key), as many as the runs

    tenant: str = field(metadata=KEY_ONLY)
    rate_keys: tuple[str, ...] = field(metadata=KEY_ONLY)  # each run's RunInput.rate.key
    most: int  # the most starts one key may hold ahead
    runs: tuple[str, ...]

    def keys(self, part: Partition) -> list[str]:
        return [part.rate_key(self.tenant, k) for k in self.rate_keys]
