"""Calls of the economy lane on an endpoint's keys (shared.endpoint_keys: one hash tag per endpoint,
so each touches one slot; no partition's context): a request's first write, the batcher's lease,
and a batch's close, advance and delivery under that lease (worker/economy/store.py). Their
``keys`` take the endpoint, not a partition. Each answers a number: ``LEASE_LOST`` when the
lease is another batcher's."""

from __future__ import annotations

from dataclasses import dataclass

from shared import endpoint_keys as ek
from shared.calls.base import ScriptCall

__all__ = ["LEASE_LOST", "EconAdvance", "EconClose", "EconDone", "EconEnqueue", "EconLease"]

LEASE_LOST = -1  # econ_close, econ_advance, econ_done: the caller does not hold the batcher's lease


@dataclass(frozen=True, slots=True)
class EconEnqueue(ScriptCall):
    """econ_enqueue.lua: a request line written once; answers 1 written, 0 already there, -1 the
    model's open requests are at ``max_open``."""

    SCRIPT = "econ_enqueue"
    KEY_NAMES = ("requests", "open")  # the endpoint's request lines, the model's open requests

    custom_id: str
    line: bytes | str
    max_open: int

    def keys(self, endpoint: str, model: str = "") -> list[str]:
        return [ek.economy_requests_key(endpoint), ek.economy_open_key(endpoint, model)]


@dataclass(frozen=True, slots=True)
class EconLease(ScriptCall):
    """econ_lease.lua: take or renew an endpoint's batcher lease; answers 1 held by the caller, 0
    held by another."""

    SCRIPT = "econ_lease"
    KEY_NAMES = ("lease",)

    holder: str
    ttl_ms: int

    def keys(self, endpoint: str) -> list[str]:
        return [ek.economy_lease_key(endpoint)]


@dataclass(frozen=True, slots=True)
class EconClose(ScriptCall):
    """econ_close.lua: a batch of the model's oldest ``n`` open requests; answers its size (0:
    nothing open)."""

    SCRIPT = "econ_close"
    KEY_NAMES = ("open", "batches", "batch", "lease", "where")

    holder: str
    batch_id: str
    n: int
    model: str

    def keys(self, endpoint: str) -> list[str]:
        return [
            ek.economy_open_key(endpoint, self.model),
            ek.economy_batches_key(endpoint),
            ek.economy_batch_key(endpoint, self.batch_id),
            ek.economy_lease_key(endpoint),
            ek.economy_where_key(endpoint),
        ]


@dataclass(frozen=True, slots=True)
class EconAdvance(ScriptCall):
    """econ_advance.lua: a batch's next state and what it learnt; answers 1, 0 when the batch is
    gone (delivered)."""

    SCRIPT = "econ_advance"
    KEY_NAMES = ("batch", "lease")

    holder: str
    count: int  # of field, value pairs
    terms: tuple[str | int, ...]  # field, value per pair

    def keys(self, endpoint: str, batch_id: str = "") -> list[str]:
        return [ek.economy_batch_key(endpoint, batch_id), ek.economy_lease_key(endpoint)]


@dataclass(frozen=True, slots=True)
class EconDone(ScriptCall):
    """econ_done.lua: a delivered batch's requests and record removed; answers the requests
    removed."""

    SCRIPT = "econ_done"
    KEY_NAMES = ("requests", "batches", "batch", "lease", "where")

    holder: str
    batch_id: str

    def keys(self, endpoint: str) -> list[str]:
        return [
            ek.economy_requests_key(endpoint),
            ek.economy_batches_key(endpoint),
            ek.economy_batch_key(endpoint, self.batch_id),
            ek.economy_lease_key(endpoint),
            ek.economy_where_key(endpoint),
        ]
