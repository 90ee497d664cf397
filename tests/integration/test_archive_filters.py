"""With the archive on, a listing's archived runs are filtered as Redis filters its own: every
RunFilter field is honoured by the archive's page too (a parent's ``?parentRunId=`` lists its
children, not every archived run of its tenant). Against a real PostgreSQL."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from producer.archived import ArchiveReads
from producer.run_filter import RunFilter
from shared.archive.store import ArchiveStore, archived_run
from shared.fields import RunField as F
from shared.listing_row import ListingRow
from shared.meta_terms import meta_term
from tests.support.postgres_server import PostgresServer, binaries

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb, pg_ctl) installed"),
]
T0 = 1_700_000_000_000


def _run(key_id: str, created: int, **fields: str) -> Any:
    h = {F.TENANT: "tenant-a", F.STATUS: "completed", F.CREATED_AT: str(created), F.FINISHED_AT: str(created + 1),
         F.LAST_SEQ: "1", F.INPUT: orjson.dumps({"metadata": {"team": "red"}}).decode(), **fields}  # fmt: skip
    return archived_run(key_id, f"events:{key_id}", h, [], {}, None)


# The one run each filter picks out of the others (each has a value of its own for that field).
PICKS: dict[str, tuple[RunFilter, str]] = {
    "status": (RunFilter(status="failed"), "failed"),
    "agent": (RunFilter(agent="helper"), "agent"),
    "session_id": (RunFilter(session_id="ses-1"), "session"),
    "batch_id": (RunFilter(batch_id="bat-1"), "batch"),
    "metadata": (RunFilter(metadata=(meta_term("team", "blue"),)), "meta"),
    "created_after": (RunFilter(created_after=T0 + 50), "newest"),
    "created_before": (RunFilter(created_before=T0 + 1), "oldest"),
    "parent_run_id": (RunFilter(parent_run_id="tsc_parent"), "child"),
}


async def test_every_listing_filter_is_honoured_by_the_archive() -> None:
    assert set(PICKS) == {f.name for f in dataclasses.fields(RunFilter)}  # a new filter gets its case
    runs = [
        _run("oldest", T0),
        _run("failed", T0 + 10, **{F.STATUS: "failed"}),
        _run("agent", T0 + 11, **{F.AGENT: "helper"}),
        _run("session", T0 + 12, **{F.SESSION_ID: "ses-1"}),
        _run("batch", T0 + 13, **{F.BATCH: "bat-1"}),
        _run("meta", T0 + 14, **{F.INPUT: orjson.dumps({"metadata": {"team": "blue"}}).decode()}),
        _run("child", T0 + 15, **{F.PARENT_RUN: "tsc_parent", F.PARENT_CALL: "c1.0"}),
        *(_run(f"other-{i}", T0 + 20 + i, **{F.PARENT_RUN: "tsc_another"}) for i in range(5)),
        _run("newest", T0 + 100),
    ]
    with PostgresServer() as pg:
        store = ArchiveStore(pg.url)
        try:
            assert await store.write(runs) == len(runs)
            reads = ArchiveReads(store)
            everything, _, _ = await reads.listing_reply("tenant-a", RunFilter(), None, 50, set())
            w = ListingRow.width()
            assert everything[2::w].count("oldest") == 1  # rows after the cursor pair
            for name, (flt, picked) in PICKS.items():
                reply, _, _ = await reads.listing_reply("tenant-a", flt, None, 50, set())
                assert reply[2::w] == [picked], name
            reply, _, _ = await reads.listing_reply("tenant-b", PICKS["parent_run_id"][0], None, 50, set())
            assert reply[2:] == []  # another tenant's
        finally:
            await store.aclose()
