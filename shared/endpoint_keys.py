"""Keys of a model endpoint, not of a partition: each endpoint's hash tag is a slot of its own, so
its provider limits (worker/adapters/limiter.py) and its economy lane's batches (worker/economy/)
live wherever Redis Cluster puts that slot; and an MCP server's shared tool listings
(worker/tools/mcp_listings.py). The run, session and tenant keys of a partition: shared.keys."""

from __future__ import annotations

import hashlib

from shared.keys import PREFIX

__all__ = [
    "economy_batch_key",
    "economy_batches_key",
    "economy_lease_key",
    "economy_left_key",
    "economy_open_key",
    "economy_requests_key",
    "economy_seq_key",
    "economy_where_key",
    "endpoint_hash",
    "mcp_listing_key",
    "provider_pause_key",
    "provider_requests_key",
    "provider_seen_key",
    "provider_slots_key",
    "provider_tokens_key",
    "provider_waiting_key",
]

# ---- provider limits: one hash tag per model endpoint (a slot of its own) ----


def endpoint_hash(base_url: str) -> str:
    """A model endpoint's id in limiter keys: the hash of its base URL (no secrets, bounded length)."""
    return hashlib.sha256(base_url.rstrip("/").lower().encode()).hexdigest()[:16]


def provider_slots_key(endpoint: str) -> str:
    """Zset holder -> expiry (ms): the calls in flight to one endpoint; a dead holder's entry expires."""
    return f"{PREFIX}:p:{{{endpoint}}}:slots"


def provider_requests_key(endpoint: str) -> str:
    """Zset holder -> start (ms): the requests of the sliding window (requestsPerMinute)."""
    return f"{PREFIX}:p:{{{endpoint}}}:requests"


def provider_tokens_key(endpoint: str) -> str:
    """Zset "holder:tokens" -> start (ms): the tokens of the sliding window (tokensPerMinute)."""
    return f"{PREFIX}:p:{{{endpoint}}}:tokens"


def provider_waiting_key(endpoint: str) -> str:
    """Zset holder -> its place: the calls waiting for the endpoint's capacity, served in this
    order (capacity_acquire.lua: when it began waiting less its run's priority times the aging quantum)."""
    return f"{PREFIX}:p:{{{endpoint}}}:waiting"


def provider_seen_key(endpoint: str) -> str:
    """Zset holder -> when it last asked: a waiter that stopped asking leaves the line."""
    return f"{PREFIX}:p:{{{endpoint}}}:seen"


def provider_pause_key(endpoint: str) -> str:
    """String: until when (ms) no call may start, set from a 429's Retry-After; expires by itself."""
    return f"{PREFIX}:p:{{{endpoint}}}:pause"


def mcp_listing_key(server: str, digest: str) -> str:
    """String: an MCP server's accepted tool listing (JSON list of tool specs), kept once for every run
    that offers it; ``digest``: the listing's content hash, which a run's stored configuration names
    instead of the tools' schemas (worker/tools/mcp_listings.py). Expires unless used."""
    return f"{PREFIX}:mcp:{{{endpoint_hash(server)}}}:{digest}"


# ---- the economy lane: one hash tag per provider endpoint, as the limiter's (worker/economy/) ----


def economy_requests_key(endpoint: str) -> str:
    """Hash custom_id -> request line (JSON): every economy request not yet answered, written once."""
    return f"{PREFIX}:e:{{{endpoint}}}:req"


def economy_open_key(endpoint: str, model: str) -> str:
    """Zset custom_id -> when written (ms): the requests of one model in no batch yet (bounded)."""
    return f"{PREFIX}:e:{{{endpoint}}}:open:{model}"


def economy_batches_key(endpoint: str) -> str:
    """Zset batch id -> when closed (ms): the endpoint's batches not yet delivered."""
    return f"{PREFIX}:e:{{{endpoint}}}:batches"


def economy_batch_key(endpoint: str, batch_id: str) -> str:
    """Hash: one batch (shared.fields.EconomyBatchField), from its closing to its delivery."""
    return f"{PREFIX}:e:{{{endpoint}}}:b:{batch_id}"


def economy_where_key(endpoint: str) -> str:
    """Hash custom_id -> the batch id it is in (from its batch's closing to its delivery)."""
    return f"{PREFIX}:e:{{{endpoint}}}:where"


def economy_left_key(endpoint: str) -> str:
    """Set of custom_ids whose run sent the call to the standard lane while it was waiting here (a
    batch all of whose requests left is cancelled at the provider); its batch's delivery clears them."""
    return f"{PREFIX}:e:{{{endpoint}}}:left"


def economy_seq_key(endpoint: str) -> str:
    """String: the endpoint's last batch number (INCR)."""
    return f"{PREFIX}:e:{{{endpoint}}}:seq"


def economy_lease_key(endpoint: str) -> str:
    """String, expiring: the worker holding the endpoint's batcher (its holder id)."""
    return f"{PREFIX}:e:{{{endpoint}}}:lease"
