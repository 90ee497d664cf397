"""A batch's results as one download: its runs in item order, one JSON line each
(``GET /v1/batches/{id}/results``, ``Client.batch_results``, ``agentmill batch results``).

The order is the batch's item index, kept per partition by the submit scripts in the batch's
``item`` index (runId -> item index; keys.INDEX_DIMS). The export walks it in pages: every
partition answers the runs from the same item index on (BATCH_RESULTS: at most PAGE runs and
SCAN_MAX entries looked at per call, one pipelined round trip per node for all partitions), and
``merge_results`` keeps the runs every partition has answered for, so no run is skipped or sent
twice while the pages go out as they are read: the API holds one page at a time, whatever the size
of the batch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from producer.listing import STATUSES, ListingError
from producer.routing import run_many
from shared.scripts import text
from shared.statuses import TERMINAL

if TYPE_CHECKING:
    from producer.service import Producer

__all__ = ["PAGE", "SCAN_MAX", "Row", "export", "merge_results", "parse_statuses", "result_line"]

PAGE = 500  # runs one partition answers per call at most
SCAN_MAX = 2_000  # item-index entries one call looks at (one run read each), at most

Row = tuple[int, str, str, str]  # item index, runId (as the tenant knows it), status, result JSON ('' = none)
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


def merge_results(replies: Sequence[Sequence[Any]], start: int) -> tuple[list[Row], int | None, set[int]]:
    """The runs several partitions' BATCH_RESULTS replies (all from item index ``start`` on) answer
    for, in item order; the item index the next page starts at (None: the end); and the replies
    that reached the end of their index with every run in this page (not asked again). A partition
    that stopped early answers only up to where it stopped (``bound``): the page keeps the runs
    before the least advanced such stop, and the next page starts there."""
    rows: list[Row] = []
    stops: list[int] = []
    for reply in replies:
        if text(reply[0]):
            stops.append(int(float(text(reply[0]))))
        rows += [
            (int(float(text(reply[k]))), text(reply[k + 1]), text(reply[k + 2]), text(reply[k + 3]))
            for k in range(1, len(reply), 4)
        ]
    rows.sort(key=lambda r: (r[0], r[1]))
    if not stops:
        return rows, None, set(range(len(replies)))
    bound = min(stops)
    # More than PAGE runs of one partition at the one item index ``start`` (item indexes are one
    # run each unless a client reuses an offset with other runIds): that page is taken whole.
    keep, nxt = (bound - 1, bound) if bound > start else (bound, bound + 1)
    done = {i for i, reply in enumerate(replies) if not text(reply[0]) and _last_index(reply) <= keep}
    return [r for r in rows if r[0] <= keep], nxt, done


def _last_index(reply: Sequence[Any]) -> int:
    return int(float(text(reply[-4]))) if len(reply) > 1 else -1


def result_line(index: int, run_id: str, status: str, raw: str) -> dict[str, Any]:
    """One line of the export: the run, its item index and status, and once it has ended its
    structured ``output`` (else the final assistant message's ``text``), ``usage`` and
    ``lastError``."""
    line: dict[str, Any] = {"runId": run_id, "index": index, "status": status}
    if not raw or status not in _TERMINAL:
        return line
    result = orjson.loads(raw)
    if "output" in result:
        line["output"] = result["output"]
    elif isinstance(msg := result.get("finalAssistantMessage"), dict):
        line["text"] = msg.get("content", "")
    if "usage" in result:
        line["usage"] = result["usage"]
    if isinstance(err := result.get("lastError"), dict):
        line["lastError"] = {"code": err.get("code", ""), "message": err.get("message", "")}
    return line


async def export(
    producer: Producer, tenant: str, batch_id: str, statuses: Sequence[str] = ()
) -> AsyncIterator[bytes]:
    """The batch's runs (those with one of ``statuses``; () = all) as JSON lines in item order,
    one chunk of lines per page. Runs still going are included with their status and no result."""
    scripts, parts = producer.scripts, producer.parts
    where = list(parts.parts)
    start = 0
    wanted = ",".join(statuses)
    while where:
        args = [tenant, batch_id, start, PAGE, SCAN_MAX, wanted]
        replies = await run_many(
            parts, scripts.batch_results, [(q, *scripts.frame(q, [], args)) for q in where]
        )
        rows, nxt, done = merge_results(replies, start)
        if rows:
            yield b"".join(orjson.dumps(result_line(*r)) + b"\n" for r in rows)
        if nxt is None:
            return
        start = nxt
        where = [q for i, q in enumerate(where) if i not in done]
