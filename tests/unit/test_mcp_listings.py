"""MCP listings kept once (worker/tools/mcp_listings.py): a stored configuration names an MCP tool
by name and listing hash; another worker fills the schemas back from the shared store, and a listing
no longer kept is asked of the server again (the same hash: as before; another: said so)."""

from __future__ import annotations

from types import SimpleNamespace

from worker.core.config import RunConfig, ToolSpec
from worker.runner.commits import config_json
from worker.tools.mcp_listings import McpListing, McpListings, MemoryListingStore, listing_of

SCHEMA = {"type": "object", "properties": {"q": {"type": "string", "description": "x" * 4000}}}


def listing(desc: str = "find") -> McpListing:
    return listing_of("srv", {"srv__find": SimpleNamespace(description=desc, parameters=SCHEMA),
                              "srv__get": SimpleNamespace(description="get", parameters={"type": "object"})})  # fmt: skip


async def test_another_worker_fills_the_schemas_back_from_the_shared_store() -> None:
    store = MemoryListingStore()
    first = McpListings(store)
    lst = first.add(listing())
    own = ToolSpec(name="echo", description="echo")
    cfg = RunConfig(agent="a", system_prompt="s", tools=[own, lst.specs["srv__find"]])
    await first.keep(cfg)
    raw = config_json(cfg)
    assert len(raw) < 2000 and b"xxxx" not in raw  # the name and the hash, not the schema
    stored = RunConfig.model_validate_json(raw)

    async def never(server: str) -> McpListing | None:
        raise AssertionError("kept: not asked of the server")

    filled, notes = await McpListings(store).fill(stored, never)
    assert filled == cfg and notes == []


async def test_a_listing_no_longer_kept_is_asked_for_again_and_a_changed_one_is_said() -> None:
    lst = listing()
    cfg = RunConfig.model_validate_json(
        config_json(RunConfig(agent="a", system_prompt="s", tools=list(lst.specs.values())))
    )

    async def same(server: str) -> McpListing | None:
        return listing()

    filled, notes = await McpListings().fill(cfg, same)
    assert [t.parameters for t in filled.tools] == [SCHEMA, {"type": "object"}] and notes == []
    changed = listing_of(
        "srv", {"srv__find": SimpleNamespace(description="new", parameters={"type": "object"})}
    )

    async def other(server: str) -> McpListing | None:
        return changed

    filled, notes = await McpListings().fill(cfg, other)
    assert [t.description for t in filled.tools] == ["new"]  # srv__get is no longer listed
    assert [(n.digest, n.now, n.dropped) for n in notes] == [(lst.digest, changed.digest, ["srv__get"])]
