"""A batch's results as one download: its runs in item order, one JSON line each
(``GET /v1/batches/{id}/results``, ``Client.batch_results``, ``agentmill batch results``).

The order is the batch's item index, kept per partition by the submit scripts in the batch's
``item`` index (runId -> item index; index_keys.INDEX_DIMS). The export walks it in pages: every
partition answers the runs from the same item index on (BATCH_RESULTS: at most PAGE runs,
SCAN_MAX entries looked at and about BYTES_MAX of results per call, one pipelined round trip per
node for all partitions), and
``merge_results`` keeps the runs every partition has answered for, so no run is skipped or sent
twice while the pages go out as they are read: the API holds one page at a time, whatever the size
of the batch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from agentmill_client.statuses import TERMINAL
from producer.listing import STATUSES, ListingError
from shared import payload_crypto
from shared.calls.results import BatchResults
from shared.replies import text
from shared.script_sending import run_many

if TYPE_CHECKING:
    from producer.service import Producer
    from shared.archive.store import ArchiveStore

__all__ = [
    "BYTES_MAX",
    "PAGE",
    "SCAN_MAX",
    "Ask",
    "Row",
    "export",
    "merge_results",
    "merge_sources",
    "parse_statuses",
    "result_line",
    "walk",
]

PAGE = 500  # runs one partition answers per call at most
SCAN_MAX = 2_000  # item-index entries one call looks at (one run read each), at most
BYTES_MAX = 1_000_000  # a call stops once its results reach this size (a result may be ~100 KB)

Row = tuple[int, str, str, str]  # item index, runId (as the tenant knows it), status, result JSON ('' = none)
Position = tuple[int, str]  # (item index, runId as its keys name it): the order of a batch's item index
_TERMINAL = frozenset(s.value for s in TERMINAL)


def parse_statuses(raw: str | None) -> tuple[str, ...]:
    """``?status=failed`` or ``?status=failed,aborted``: the statuses to keep (() = all)."""
    if not raw:
        return ()
    wanted = tuple(dict.fromkeys(s.strip() for s in raw.split(",") if s.strip()))
    bad = [s for s in wanted if s not in STATUSES]
    if bad or not wanted:
        raise ListingError("status", f"a comma list of {', '.join(STATUSES)}")
    return wanted


def merge_results(
    replies: Sequence[Sequence[Any]],
) -> tuple[list[Row], Position | None, set[int]]:
    """The runs several partitions' BATCH_RESULTS replies (all from the same position on) answer
    for, in item order; the position the next page starts after (None: the end); and the replies
    that reached the end of their index with all their runs in this page (not asked again). A
    partition that stopped early answers only up to where it stopped: the page keeps the runs up
    to the least advanced such stop, and the next page starts after it."""
    rows: list[tuple[Position, Row]] = []
    stops: list[Position] = []
    ends: list[Position | None] = []
    for reply in replies:
        if text(reply[0]):
            stops.append((int(float(text(reply[0]))), text(reply[1])))
        got = [
            ((int(float(text(reply[k]))), text(reply[k + 1])),
             (int(float(text(reply[k]))), text(reply[k + 2]), text(reply[k + 3]), text(reply[k + 4])))
            for k in range(2, len(reply), 5)
        ]  # fmt: skip
        ends.append(got[-1][0] if got else None)
        rows += got
    rows.sort(key=lambda r: r[0])
    if not stops:
        return [r for _, r in rows], None, set(range(len(replies)))
    bound = min(stops)
    done = {i for i, end in enumerate(ends) if not text(replies[i][0]) and (end is None or end <= bound)}
    return [r for at, r in rows if at <= bound], bound, done


def result_line(index: int, run_id: str, status: str, raw: str) -> dict[str, Any]:
    """One line of the export: the run, its item index and status, and once it has ended its
    structured ``output`` (else the final assistant message's ``text``), ``usage`` and
    ``lastError``."""
    line: dict[str, Any] = {"runId": run_id, "index": index, "status": status}
    if not raw or status not in _TERMINAL:
        return line
    result = payload_crypto.loads(raw)
    if "output" in result:
        line["output"] = result["output"]
    elif isinstance(msg := result.get("finalAssistantMessage"), dict):
        line["text"] = msg.get("content", "")
    if "usage" in result:
        line["usage"] = result["usage"]
    if isinstance(err := result.get("lastError"), dict):
        line["lastError"] = {"code": err.get("code", ""), "message": err.get("message", "")}
    return line


# (partition indexes, position) -> their BATCH_RESULTS replies from just after it
Ask = Callable[[list[int], Position], Awaitable[list[Any]]]


async def walk(ask: Ask, partitions: int) -> AsyncIterator[list[Row]]:
    """The pages of an export: ``ask`` gets the replies of the partitions named, all from the same
    position on; partitions that answered for all their runs are not asked again."""
    where = list(range(partitions))
    start: Position = (0, "")
    while where:
        rows, nxt, done = merge_results(await ask(where, start))
        if rows:
            yield rows
        if nxt is None:
            return
        start = nxt
        where = [q for i, q in enumerate(where) if i not in done]


async def export(
    producer: Producer, tenant: str, batch_id: str, statuses: Sequence[str] = ()
) -> AsyncIterator[bytes]:
    """The batch's runs (those with one of ``statuses``; () = all) as JSON lines in item order,
    one chunk of lines per page. Runs still going are included with their status and no result."""
    scripts, parts = producer.scripts, producer.parts
    wanted = ",".join(statuses)

    async def ask(where: list[int], start: Position) -> list[Any]:
        call = BatchResults(tenant, batch_id, start[0], start[1], PAGE, SCAN_MAX, wanted, BYTES_MAX)
        calls = [
            (q, *scripts.framing.frame(q, call.keys(q), call.argv())) for q in (parts.parts[i] for i in where)
        ]
        return await run_many(parts, scripts.batch_results, calls)

    pages = walk(ask, len(parts.parts))
    if producer.archive is not None:  # runs that left Redis are in the archive: both, in item order
        pages = merge_sources(pages, _archived(producer.archive.store, tenant, batch_id, statuses))
    async for rows in pages:
        yield b"".join(orjson.dumps(result_line(*r)) + b"\n" for r in rows)


async def _archived(
    store: ArchiveStore, tenant: str, batch_id: str, statuses: Sequence[str]
) -> AsyncIterator[list[Row]]:
    """The batch's archived runs, in pages, in item order."""
    after: tuple[int, str] | None = None
    while rows := await store.batch_page(tenant, batch_id, after, PAGE, statuses):
        yield rows
        after = rows[-1][0], rows[-1][1]


async def merge_sources(
    first: AsyncIterator[list[Row]], second: AsyncIterator[list[Row]]
) -> AsyncIterator[list[Row]]:
    """Two sources of pages in item order, each with one run per item index, as one: one line per
    item index, ``first``'s when both have one (a run both hold: archived, not yet out of Redis's
    item index; or Redis's newer run of the item: a retry that took an archived run's place). A page
    goes out up to the least advanced source's last item index, so an item both hold leaves with
    both in hand. An item index goes out once: a source may name one again in a later page (the
    archive, read in pages while the archiver goes on: a retry archived meanwhile becomes its item's
    newest run, after the last (item, id) read), and the item has gone out already."""
    sources, bufs, done = (first, second), [list[Row](), list[Row]()], [False, False]
    sent = -1  # the last item index that went out
    while True:
        for i in (0, 1):
            while not done[i] and not bufs[i]:
                try:
                    bufs[i] = sorted(await anext(sources[i]), key=_order)
                except StopAsyncIteration:
                    done[i] = True
        if not bufs[0] and not bufs[1]:
            return
        bound = min((bufs[i][-1][0] for i in (0, 1) if not done[i]), default=None)
        out: dict[int, Row] = {}
        for i in (0, 1):
            n = sum(1 for r in bufs[i] if bound is None or r[0] <= bound)
            for r in bufs[i][:n]:
                if r[0] > sent:
                    out.setdefault(r[0], r)
            bufs[i] = bufs[i][n:]
        if out:
            keys = sorted(out)
            sent = keys[-1]
            yield [out[k] for k in keys]


def _order(r: Row) -> tuple[int, str]:
    return r[0], r[1]
