"""The export's pages over several partitions without Redis (producer/batch_results.py): whatever
how the runs spread over the partitions and where each partition's call stops, every run comes
once, in item order."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producer.batch_results import merge_results, merge_sources, parse_statuses, result_line, walk
from producer.listing import ListingError

Entry = tuple[int, str, str]  # item index, runId, status


def batch_results_lua(
    entries: list[Entry], start: tuple[int, str], limit: int, scan_max: int, want: set[str]
) -> list[Any]:
    """What shared/lua/batch_results.lua answers, for one partition's item index."""
    out: list[Any] = ["", ""]
    n = 0
    after = [e for e in sorted(entries) if e[0] > start[0] or (e[0] == start[0] and e[1] > start[1])]
    for scanned, (index, rid, status) in enumerate(after, 1):
        if not want or status in want:
            out += [str(index), rid, rid, status, ""]
            n += 1
        if n >= limit or scanned >= scan_max:
            out[0], out[1] = str(index), rid
            return out
    return out


def export(parts: list[list[Entry]], limit: int, scan_max: int, want: set[str]) -> tuple[list[Entry], int]:
    calls = 0

    async def ask(where: list[int], start: tuple[int, str]) -> list[Any]:
        nonlocal calls
        calls += len(where)
        return [batch_results_lua(parts[i], start, limit, scan_max, want) for i in where]

    async def go() -> list[Entry]:
        return [(r[0], r[1], r[2]) async for page in walk(ask, len(parts)) for r in page]

    return asyncio.run(go()), calls


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["completed", "failed", "queued"])), max_size=120),
    st.integers(1, 4),
    st.integers(1, 7),
    st.integers(1, 9),
    st.sampled_from([set(), {"failed"}, {"failed", "queued"}]),
)
def test_every_run_comes_once_in_item_order(
    runs: list[tuple[int, str]], n_parts: int, limit: int, scan_max: int, want: set[str]
) -> None:
    parts: list[list[Entry]] = [[] for _ in range(n_parts)]
    for index, (part, status) in enumerate(runs):
        parts[part % n_parts].append((index, f"r{index}", status))
    got, _ = export(parts, limit, scan_max, want)
    assert got == [(i, f"r{i}", s) for i, (_, s) in enumerate(runs) if not want or s in want]


def test_pages_need_few_calls_and_ended_partitions_are_not_asked_again() -> None:
    parts: list[list[Entry]] = [[(i, f"r{i}", "completed") for i in range(p, 10_000, 4)] for p in range(4)]
    got, calls = export(parts, 500, 2_000, set())
    assert [g[0] for g in got] == list(range(10_000))
    assert calls <= 4 * (10_000 // 4 // 500 + 1)
    # One partition holding all but one run: the other is asked once.
    lopsided = [[(i, f"r{i}", "completed") for i in range(1, 3_000)], [(0, "r0", "completed")]]
    got, calls = export(lopsided, 500, 2_000, set())
    assert [g[0] for g in got] == list(range(3_000)) and calls == 6 + 1


def test_runs_sharing_an_item_index_all_come() -> None:
    parts: list[list[Entry]] = [
        [(5, f"a{i}", "queued") for i in range(3)] + [(6, "b", "queued")],
        [(5, "c", "queued")],
    ]
    got, _ = export(parts, 2, 2, set())
    assert got == [
        (5, "a0", "queued"),
        (5, "a1", "queued"),
        (5, "a2", "queued"),
        (5, "c", "queued"),
        (6, "b", "queued"),
    ]


def test_merge_keeps_what_every_partition_answered_for() -> None:
    stopped = ["4", "k4", "1", "k1", "r1", "completed", "", "4", "k4", "r4", "completed", ""]
    ended = ["", "", "2", "k2", "r2", "completed", "", "9", "k9", "r9", "completed", ""]
    rows, nxt, done = merge_results([stopped, ended])
    assert [r[:2] for r in rows] == [(1, "r1"), (2, "r2"), (4, "r4")] and nxt == (4, "k4") and done == set()
    rows, nxt, done = merge_results([["", "", "2", "k2", "r2", "queued", ""], ["", ""]])
    assert [r[0] for r in rows] == [2] and nxt is None and done == {0, 1}


def test_lines_say_what_the_run_has() -> None:
    result = {"finalAssistantMessage": {"role": "assistant", "content": "hi"}, "usage": {"inputTokens": 1}}
    assert result_line(0, "r", "completed", orjson.dumps(result).decode()) == {
        "runId": "r", "index": 0, "status": "completed", "text": "hi", "usage": {"inputTokens": 1},
    }  # fmt: skip
    structured = {**result, "output": {"label": "spam"}}
    assert result_line(1, "r", "completed", orjson.dumps(structured).decode())["output"] == {"label": "spam"}
    assert "text" not in result_line(1, "r", "completed", orjson.dumps(structured).decode())
    failed = {"lastError": {"code": "provider_error", "message": "bad", "retryable": False}}
    assert result_line(2, "r", "failed", orjson.dumps(failed).decode())["lastError"] == {
        "code": "provider_error", "message": "bad",
    }  # fmt: skip
    # A run going again after a retry shows no earlier result.
    assert result_line(3, "r", "running", orjson.dumps(result).decode()) == {
        "runId": "r", "index": 3, "status": "running",
    }  # fmt: skip


def test_status_filters() -> None:
    assert parse_statuses(None) == () and parse_statuses("") == ()
    assert parse_statuses("failed, aborted,failed") == ("failed", "aborted")
    for bad in ("done", ",", "failed,nope"):
        with pytest.raises(ListingError):
            parse_statuses(bad)


def _pages(rows: list[tuple[int, str, str, str]], sizes: list[int]) -> Any:
    async def gen() -> Any:
        at, k = 0, 0
        while at < len(rows):
            n = max(1, sizes[k % len(sizes)])
            yield rows[at : at + n]
            at, k = at + n, k + 1

    return gen()


@given(
    st.sets(st.integers(0, 300), max_size=120),
    st.sets(st.integers(0, 300), max_size=120),
    st.lists(st.integers(1, 40), min_size=1, max_size=5),
    st.lists(st.integers(1, 40), min_size=1, max_size=5),
)
@settings(max_examples=200, deadline=None)
def test_redis_and_the_archive_merge_into_every_run_once_in_item_order(
    in_redis: set[int], archived: set[int], redis_pages: list[int], archive_pages: list[int]
) -> None:
    """Runs only in Redis, only in the archive, or in both (archived, not yet expired): each comes
    once, in item order, as Redis has it when in both, however the two sources page."""
    redis_rows = [(i, f"r{i:04}", "completed", "redis") for i in sorted(in_redis)]
    archive_rows = [(i, f"r{i:04}", "completed", "archive") for i in sorted(archived)]

    async def go() -> list[tuple[int, str, str, str]]:
        out = []
        async for page in merge_sources(_pages(redis_rows, redis_pages), _pages(archive_rows, archive_pages)):
            assert page
            out += page
        return out

    got = asyncio.run(go())
    assert [r[0] for r in got] == sorted(in_redis | archived)
    assert all(r[3] == ("redis" if r[0] in in_redis else "archive") for r in got)


@given(
    st.sets(st.integers(0, 300), max_size=120),
    st.sets(st.integers(0, 300), max_size=120),
    st.lists(st.integers(1, 40), min_size=1, max_size=5),
    st.lists(st.integers(1, 40), min_size=1, max_size=5),
)
@settings(max_examples=200, deadline=None)
def test_an_item_redis_and_the_archive_hold_under_two_runs_comes_once_as_redis_has_it(
    in_redis: set[int], archived: set[int], redis_pages: list[int], archive_pages: list[int]
) -> None:
    """A retry in Redis that took an archived run's place (another id, sorting before or after
    it): one line per item index, the retry's."""
    redis_rows = [(i, f"{'a' if i % 2 else 'z'}{i:04}", "completed", "redis") for i in sorted(in_redis)]
    archive_rows = [(i, f"m{i:04}", "failed", "archive") for i in sorted(archived)]

    async def go() -> list[tuple[int, str, str, str]]:
        out = []
        async for page in merge_sources(_pages(redis_rows, redis_pages), _pages(archive_rows, archive_pages)):
            out += page
        return out

    got = asyncio.run(go())
    assert [r[0] for r in got] == sorted(in_redis | archived)
    assert all(r[3] == ("redis" if r[0] in in_redis else "archive") for r in got)


def test_an_item_archived_again_between_the_archives_pages_comes_once() -> None:
    """The export reads the archive in pages while the archiver goes on: a retry archived after the
    archive's first page became the newest run of its item, so the next page, read after the first
    page's last (item, id), starts with that item again. It went out already (Redis's retry): once."""
    redis_rows = [(0, "run_b0", "completed", "redis"), (1, "run_1", "completed", "redis"),
                  (2, "run_b2", "completed", "redis")]  # fmt: skip
    first = [(0, "run_a0", "failed", "archive"), (2, "run_a2", "failed", "archive")]
    then = [(2, "run_b2", "completed", "archive")]  # run_b2 archived meanwhile: after (2, "run_a2")

    async def archive() -> Any:
        yield first
        yield then

    async def go() -> list[tuple[int, str, str, str]]:
        out = []
        async for page in merge_sources(_pages(redis_rows, [3]), archive()):
            out += page
        return out

    got = asyncio.run(go())
    assert [(r[0], r[1], r[3]) for r in got] == [(0, "run_b0", "redis"), (1, "run_1", "redis"),
                                                 (2, "run_b2", "redis")]  # fmt: skip
