"""MCP servers' tool listings, kept once per server and listing instead of in every run.

A listing may hold 256 tools of up to 64 kB each (worker/tools/mcp.py). A run's configuration
offers some of them, and it is stored with the run (in its checkpoint, or once an attempt in the run
hash's config field) for as long as the run is kept. So an MCP tool's ``ToolSpec`` carries the
content hash of its server's accepted listing (``digest``), a run's stored configuration keeps such
a tool as its name and that hash (worker/runner/commits.py), and the listing itself is kept once
under ``endpoint_keys.mcp_listing_key(server, digest)``:

- a run starting stores its listings (``McpListings.keep``): the key's expiry is pushed back to
  ``ttl_s``, or the listing written when the key is gone; at most once per ``REFRESH_S`` per listing
  and worker;
- a run resumed from its checkpoint (on any worker) gets its tools' schemas back
  (``McpListings.fill``) before the machine sees the state: from this worker's listings, else from
  the key (its expiry pushed back); the hash pins the very listing the run started with.

A listing gone from Redis (a run parked past ``ttl_s`` with no run of the same listing started
meanwhile, or Redis lost it) is asked of the server again. The same hash: the run goes on as
before. Another: the run goes on with the server's current schemas of the tools it had (a tool the
server no longer lists is left out), and ``Relisted`` says so (the runner publishes it as the
``mcp_tools_relisted`` status event, worker/machine/notices.py): a run never loses its tools silently.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from shared import endpoint_keys
from shared.profiles import MCP_SEP
from worker.core.config import RunConfig, ToolSpec

__all__ = [
    "DEFAULT_TTL_S",
    "REFRESH_S",
    "ListingStore",
    "McpListing",
    "McpListings",
    "MemoryListingStore",
    "RedisListingStore",
    "Relisted",
    "listing_of",
    "server_of",
]

DEFAULT_TTL_S = 8 * 24 * 3600  # the default retention (7 days) and the longest run (24 h)
REFRESH_S = 60.0  # a worker pushes a listing's expiry back at most this often
MAX_LOCAL = 64  # listings a worker keeps in memory, least recently used dropped first
_SPEC_JSON = ToolSpec.__pydantic_serializer__


def server_of(name: str) -> str:
    """The server part of an exposed name ``<server>__<tool>``."""
    return name.partition(MCP_SEP)[0]


@dataclass(frozen=True, slots=True)
class McpListing:
    """One server's accepted listing: its tools by exposed name (tagged with ``digest``) and the JSON
    that is stored (the tools' specs, without the tag)."""

    server: str
    digest: str
    specs: dict[str, ToolSpec]
    body: bytes

    @classmethod
    def parse(cls, server: str, digest: str, body: bytes) -> McpListing:
        specs = {}
        for raw in orjson.loads(body):
            spec = ToolSpec.model_validate({**raw, "listing": digest})
            specs[spec.name] = spec
        return cls(server, digest, specs, body)


def listing_of(server: str, tools: Mapping[str, Any]) -> McpListing:
    """The listing of ``tools`` (exposed name -> an object with ``description`` and ``parameters``),
    hashed over its content: the same tools give the same digest on every worker."""
    plain = [ToolSpec(name=n, description=t.description, parameters=t.parameters) for n, t in tools.items()]
    body = b"[%b]" % b",".join(_SPEC_JSON.to_json(s, by_alias=True, exclude={"listing"}) for s in plain)
    canonical = orjson.dumps(orjson.loads(body), option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(canonical).hexdigest()[:32]
    specs = {s.name: s.model_copy(update={"listing": digest}) for s in plain}
    return McpListing(server, digest, specs, body)


class ListingStore(Protocol):
    """Where listings are kept for every worker (Redis; in memory for the runner's unit tests)."""

    async def keep(self, server: str, digest: str, body: bytes, ttl_s: int) -> None:
        """The listing kept ``ttl_s`` from now: its expiry pushed back, or it written when gone."""
        ...

    async def get(self, server: str, digest: str, ttl_s: int) -> bytes | None:
        """The listing (its expiry pushed back to ``ttl_s``), or None when it is gone."""
        ...


class RedisListingStore:
    """ListingStore on Redis: ``endpoint_keys.mcp_listing_key``. ``on_key``: runs a function with the client of
    the node serving a key (``Partitions.call_key``)."""

    def __init__(self, on_key: Callable[[str, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]) -> None:
        self.on_key = on_key

    async def keep(self, server: str, digest: str, body: bytes, ttl_s: int) -> None:
        k = endpoint_keys.mcp_listing_key(server, digest)

        async def fn(c: Any) -> None:
            if not await c.expire(k, ttl_s):
                await c.set(k, body, ex=ttl_s)

        await self.on_key(k, fn)

    async def get(self, server: str, digest: str, ttl_s: int) -> bytes | None:
        k = endpoint_keys.mcp_listing_key(server, digest)
        got: bytes | None = await self.on_key(k, lambda c: c.getex(k, ex=ttl_s))
        return got


@dataclass
class MemoryListingStore:
    """ListingStore in memory (no expiry): shared by the runs of one test as Redis is by workers."""

    listings: dict[tuple[str, str], bytes] = field(default_factory=dict)

    async def keep(self, server: str, digest: str, body: bytes, ttl_s: int) -> None:
        self.listings.setdefault((server, digest), body)

    async def get(self, server: str, digest: str, ttl_s: int) -> bytes | None:
        return self.listings.get((server, digest))


@dataclass(frozen=True, slots=True)
class Relisted:
    """A run's listing was gone and its server lists other tools now: the run goes on with those."""

    server: str
    digest: str  # the listing the run started with
    now: str | None  # the server's listing now (None: the server is not the profile's any more)
    dropped: list[str]  # the run's tools the server does not list now


Relist = Callable[[str], Awaitable[McpListing | None]]  # a server's listing, asked of it now


class McpListings:
    """One worker's listings (those it listed or read, by server and digest) and the shared store."""

    def __init__(
        self,
        store: ListingStore | None = None,
        *,
        ttl_s: int = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store: ListingStore = store if store is not None else MemoryListingStore()
        self.ttl_s = ttl_s
        self.clock = clock
        self._local: OrderedDict[tuple[str, str], McpListing] = OrderedDict()
        self._kept: dict[tuple[str, str], float] = {}  # when this worker last pushed an expiry back

    def add(self, listing: McpListing) -> McpListing:
        """A listing this worker holds (listed, or read back)."""
        key = (listing.server, listing.digest)
        self._local[key] = listing
        self._local.move_to_end(key)
        while len(self._local) > MAX_LOCAL:
            gone, _ = self._local.popitem(last=False)
            self._kept.pop(gone, None)
        return listing

    async def _refresh(self, listing: McpListing) -> None:
        key = (listing.server, listing.digest)
        now = self.clock()
        if now - self._kept.get(key, float("-inf")) < REFRESH_S:
            return
        await self.store.keep(listing.server, listing.digest, listing.body, self.ttl_s)
        self._kept[key] = now

    async def keep(self, config: RunConfig) -> None:
        """The listings a starting run's tools came from, kept for every worker."""
        for key in {(server_of(t.name), t.listing) for t in config.tools if t.listing is not None}:
            listing = self._local.get(key)
            if listing is not None:
                await self._refresh(listing)

    async def _find(self, server: str, digest: str) -> McpListing | None:
        local = self._local.get((server, digest))
        if local is not None:
            self._local.move_to_end((server, digest))
            await self._refresh(local)
            return local
        body = await self.store.get(server, digest, self.ttl_s)
        if body is None:
            return None
        self._kept[(server, digest)] = self.clock()
        return self.add(McpListing.parse(server, digest, body))

    async def fill(self, config: RunConfig, relist: Relist) -> tuple[RunConfig, list[Relisted]]:
        """``config`` as read from a run's stored configuration, with its MCP tools' schemas back."""
        wanted = {(server_of(t.name), t.listing) for t in config.tools if t.listing is not None}
        if not wanted:
            return config, []
        found: dict[tuple[str, str], McpListing | None] = {}
        notes: list[Relisted] = []
        for server, digest in sorted(wanted):
            listing = await self._find(server, digest)
            if listing is None:
                listing = await relist(server)
                if listing is not None:
                    self.add(listing)
                    await self._refresh(listing)
                if listing is None or listing.digest != digest:
                    had = [
                        t.name for t in config.tools if t.listing == digest and server_of(t.name) == server
                    ]
                    dropped = [n for n in had if listing is None or n not in listing.specs]
                    notes.append(Relisted(server, digest, listing.digest if listing else None, dropped))
            found[(server, digest)] = listing
        tools: list[ToolSpec] = []
        for t in config.tools:
            if t.listing is None:
                tools.append(t)
            elif (got := found[(server_of(t.name), t.listing)]) is not None and t.name in got.specs:
                tools.append(got.specs[t.name])
        return config.model_copy(update={"tools": tools}), notes
