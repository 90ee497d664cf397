"""Key rotation of the archive (``agentmill keys rotate-data``): every archived row whose sealed strings
(shared/payload_crypto.py) are under a key other than the current one is written again under the
current key, a page of runs at a time (each page one transaction: a run's row, its events and its
tool records), with progress. Safe to stop and start again: rows already under the current key are
left alone, so a second pass rewrites only what the first did not reach."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.archive.store import ArchiveStore
from shared.payload_crypto import Codec

__all__ = ["Progress", "rekey"]

_PAGE = (
    "SELECT key_id, created_at, input, result, record::text AS record FROM runs "
    "WHERE (key_id, created_at) > ($1, $2) ORDER BY key_id, created_at LIMIT $3"
)
_PAGE_KEYS = "JOIN unnest($1::text[], $2::bigint[]) AS u(k, c) ON t.key_id = u.k AND t.created_at = u.c"
_EVENTS = f"SELECT t.key_id, t.created_at, t.seq, t.payload FROM run_events t {_PAGE_KEYS} WHERE t.payload LIKE '%enc1:%'"
_TOOLS = (
    f"SELECT t.key_id, t.created_at, t.tool_call_id, t.record FROM run_tools t {_PAGE_KEYS} "
    "WHERE t.record LIKE '%enc1:%'"
)
_SET_RUN = "UPDATE runs SET input = $3, result = $4, record = $5::jsonb WHERE key_id = $1 AND created_at = $2"
_SET_EVENT = "UPDATE run_events SET payload = $4 WHERE key_id = $1 AND created_at = $2 AND seq = $3"
_SET_TOOL = "UPDATE run_tools SET record = $4 WHERE key_id = $1 AND created_at = $2 AND tool_call_id = $3"


@dataclass(slots=True)
class Progress:
    """Runs looked at of ``total`` (as counted at the start), rows written again, sealed strings resealed."""

    total: int = 0
    runs: int = 0
    rows: int = 0
    strings: int = 0


async def rekey(
    store: ArchiveStore,
    codec: Codec,
    *,
    page: int = 200,
    pause_s: float = 0.0,
    report: Callable[[Progress], None] = lambda p: None,
) -> Progress:
    """One pass over the archive; ``report`` after each page. Raises DataKeyError for a row sealed
    with a key the codec does not hold (list every key still in use, the current one first)."""
    if not codec.on:
        raise ValueError("AGENTMILL_DATA_KEYS is not set: there is no current key to seal with")
    pool = await store.pool()
    done = Progress(total=int((await store.fetch("SELECT count(*) AS n FROM runs"))[0]["n"]))
    after: tuple[str, int] = ("", -(2**62))
    while True:
        async with pool.acquire() as conn, conn.transaction():
            runs = await conn.fetch(_PAGE, after[0], after[1], page)
            if not runs:
                break
            ids, ats = [r["key_id"] for r in runs], [r["created_at"] for r in runs]
            run_rows = _resealed(codec, done, [(r["key_id"], r["created_at"], r["input"], r["result"], r["record"])
                                               for r in runs], 2)  # fmt: skip
            await _write(conn, _SET_RUN, run_rows)
            events = await conn.fetch(_EVENTS, ids, ats)
            await _write(conn, _SET_EVENT, _resealed(codec, done, [tuple(e) for e in events], 3))
            tools = await conn.fetch(_TOOLS, ids, ats)
            await _write(conn, _SET_TOOL, _resealed(codec, done, [tuple(t) for t in tools], 3))
        after = (runs[-1]["key_id"], runs[-1]["created_at"])
        done.runs += len(runs)
        report(done)
        if pause_s:
            await asyncio.sleep(pause_s)
    return done


def _resealed(codec: Codec, done: Progress, rows: list[tuple[Any, ...]], first: int) -> list[tuple[Any, ...]]:
    """The rows whose text columns (from index ``first``) changed, resealed; counts them in ``done``."""
    out = []
    for row in rows:
        cols, n = list(row), 0
        for i in range(first, len(cols)):
            if isinstance(cols[i], str):
                cols[i], k = codec.reseal_text(cols[i])
                n += k
        if n:
            out.append(tuple(cols))
            done.rows += 1
            done.strings += n
    return out


async def _write(conn: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
    if rows:
        await conn.executemany(sql, rows)
